/**
 * The operator console: HTML views of the jobs, the quarantine, the services and the audit log on
 * a listener of its own (`CONSOLE_PORT`), and the actions the CLI has (retry, quarantine replay and
 * purge) through the same library code (`src/operator/`), each audited with the identity and the
 * reason typed. Rules: reads run on the console's own pool, in read-only transactions bounded by
 * `CONSOLE_TIMEOUT_MS`; without an identity nothing acts (no form is drawn, every action answers
 * 403); an action needs the identity's permission, its CSRF token and a same-origin request.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { listening, type HttpServer } from '../http/server.js';
import { sharedAnswer } from '../http/shared.js';
import { sql, type Kysely } from 'kysely';
import {
  FAILED_JOB_STATUSES,
  FINAL_JOB_STATUSES,
  JOB_STATUSES,
  QUARANTINE_REASONS,
  type FailedJobStatus,
  type JobStatus,
  type QuarantineReason,
} from '../../machines/index.js';
import type { Config } from '../config.js';
import { listAudit } from '../db/audit.js';
import { findJobId, listJobs, loadAttempts, loadJob, loadTransitions, type Since } from '../db/jobs.js';
import { readOverview, readServices } from '../db/overview.js';
import { listQuarantine, quarantineGroups } from '../db/quarantineView.js';
import type { Database, JobRow, TransitionRow } from '../db/schema.js';
import { parseMoment } from '../duration.js';
import type { Logger } from '../logger.js';
import { purgeQuarantined, replayQuarantined, replaySummary } from '../operator/quarantine.js';
import { refusal, retryJobs, retryRequests } from '../operator/retryJobs.js';
import { readMachineGraph } from '../statecharts/machineGraph.js';
import { renderSvg, toDot } from '../statecharts/render.js';
import { loadAssets } from './assets.js';
import {
  createSessions,
  csrfMatches,
  identify,
  matchToken,
  parseTokenFile,
  sameOrigin,
  sessionCookie,
  type ConsoleAction,
  type Identity,
  type TokenEntry,
} from './identity.js';
import { jobActions, retryableStatuses } from './jobActions.js';
import { createViews, showTime, type PageContent, type ViewName } from './views.js';

/** The inbox consumer's backlog, as the daemon reads it. */
export interface InboxLag {
  pending: number;
  ackPending: number;
}

export interface ConsoleOptions {
  config: Pick<
    Config,
    | 'CONSOLE_HOST'
    | 'CONSOLE_PORT'
    | 'CONSOLE_TOKEN_FILE'
    | 'CONSOLE_TRUSTED_PROXIES'
    | 'CONSOLE_USER_HEADER'
    | 'CONSOLE_TIMEOUT_MS'
    | 'MAX_ENVELOPE_BYTES'
    | 'RESULTS_BUCKET'
    | 'QUARANTINE_PAYLOAD_MAX_BYTES'
  >;
  /** The console's own database handle: never the inbox's pool. */
  db: Kysely<Database>;
  logger: Logger;
  /** The inbox's lag, when this daemon runs the inbox. */
  inboxLag?: (() => Promise<InboxLag>) | undefined;
}

/** The console's listener: its server, bound port and close. */
export type ConsoleServer = HttpServer;

/** How long a session lasts after signing in. */
export const SESSION_TTL_MS = 8 * 3_600_000;
/** Rows per page of the lists. */
const PAGE = 50;
/** Payload bytes a quarantined message shows. */
export const PREVIEW_BYTES = 2_048;
/**
 * The overview's and the services' figures are read at most once in this time, whoever asks: any
 * number of open consoles cost the database one read each (the rollup is as old anyway).
 */
export const FIGURES_REUSE_MS = 5_000;
/** The largest form body taken. */
const MAX_BODY = 64 * 1024;

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store',
};

/** An answer that ends a request early (a refusal, a bad request). */
class Answer extends Error {
  constructor(
    readonly status: number,
    readonly heading: string,
    message: string,
  ) {
    super(message);
  }
}

/** Read the token file; a file that cannot be read or parsed stops the start. */
function readTokens(path: string): TokenEntry[] {
  if (!path) return [];
  try {
    return parseTokenFile(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`CONSOLE_TOKEN_FILE=${path}: ${(err as Error).message}`, { cause: err });
  }
}

async function readBody(req: IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) throw new Answer(413, 'Too large', 'the form is larger than the console takes');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

const SERVICE = /^[A-Za-z0-9_-]{1,100}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function moment(text: string, what: string): Since | undefined {
  if (text.trim() === '') return undefined;
  const m = parseMoment(text);
  if (!m)
    throw new Answer(400, 'Bad filter', `${what} must be a span back from now (30m, 1h, 2d) or an ISO time`);
  return m;
}

function service(text: string): string | undefined {
  const s = text.trim();
  if (s === '') return undefined;
  if (!SERVICE.test(s)) throw new Answer(400, 'Bad filter', 'a service name is letters, digits, - or _');
  return s;
}

function note(form: URLSearchParams): string {
  const n = (form.get('note') ?? '').trim();
  if (n === '') throw new Answer(400, 'Reason missing', 'every action records its reason: type one');
  return n.slice(0, 1000);
}

/** The trace id of a W3C traceparent (`00-<trace id>-<span id>-<flags>`), or null. */
function traceIdOf(traceparent: unknown): string | null {
  return typeof traceparent === 'string'
    ? (/^[0-9a-f]{2}-([0-9a-f]{32})-/.exec(traceparent)?.[1] ?? null)
    : null;
}

/** Start the console's listener. Throws when the token file is unreadable or malformed. */
export async function startConsole(opts: ConsoleOptions): Promise<ConsoleServer> {
  const { config: cfg, db, logger } = opts;
  readTokens(cfg.CONSOLE_TOKEN_FILE);
  const sessions = createSessions(SESSION_TTL_MS);
  const sources = {
    sessions,
    trustedProxies: cfg.CONSOLE_TRUSTED_PROXIES,
    userHeader: cfg.CONSOLE_USER_HEADER,
  };
  const graph = readMachineGraph();
  const retryable = retryableStatuses(graph).filter((s): s is FailedJobStatus =>
    (FAILED_JOB_STATUSES as readonly string[]).includes(s),
  );
  const svg = renderSvg(toDot(graph)).then((s) => s.slice(Math.max(0, s.indexOf('<svg'))));
  svg.catch(() => undefined);
  const assets = loadAssets();
  const render = createViews();
  const timeout = cfg.CONSOLE_TIMEOUT_MS;
  const bounded = { statementTimeoutMs: timeout };
  const overviewFigures = sharedAnswer(() => readOverview(db, bounded), FIGURES_REUSE_MS);
  const serviceFigures = sharedAnswer(() => readServices(db, bounded), FIGURES_REUSE_MS);

  /** A read-only transaction bounded by the console's statement timeout. */
  const read = <T>(fn: (tx: Kysely<Database>) => Promise<T>) =>
    db
      .transaction()
      .setAccessMode('read only')
      .execute(async (tx) => {
        await sql`SELECT set_config('statement_timeout', ${String(timeout)}, true)`.execute(tx);
        return fn(tx);
      });

  const send = (res: ServerResponse, status: number, type: string, body: string | Buffer, extra = {}) => {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...extra });
    res.end(body);
  };
  const redirect = (res: ServerResponse, to: string, extra: Record<string, string> = {}) => {
    res.writeHead(303, { ...SECURITY_HEADERS, location: to, ...extra });
    res.end();
  };
  const page = (
    res: ServerResponse,
    who: Identity | undefined,
    view: ViewName,
    data: PageContent,
    status = 200,
  ) =>
    send(
      res,
      status,
      'text/html; charset=utf-8',
      render(view, { ...data, identity: who, csrf: who?.csrf ?? '' }),
    );
  const message = (
    res: ServerResponse,
    who: Identity | undefined,
    status: number,
    heading: string,
    text: string,
    more: Record<string, unknown> = {},
  ) =>
    page(
      res,
      who,
      '@message',
      { title: heading, section: '', heading, text, bad: status >= 400, ...more },
      status,
    );

  const can = (who: Identity | undefined, action: ConsoleAction) => who?.actions.includes(action) === true;

  // -------------------------------------------------------------------------------------------
  // Views
  // -------------------------------------------------------------------------------------------

  async function overview(res: ServerResponse, who: Identity | undefined) {
    const f = await overviewFigures();
    let lag: InboxLag | undefined;
    let lagError: string | undefined;
    if (opts.inboxLag) {
      try {
        lag = await opts.inboxLag();
      } catch (err) {
        lagError = (err as Error).message;
      }
    }
    const openStatuses = ['pending', 'published', 'processing'] as const;
    const byService = new Map<string, Record<string, number>>();
    for (const o of f.open) {
      const counts = byService.get(o.service) ?? {};
      counts[o.status] = o.count;
      byService.set(o.service, counts);
    }
    page(res, who, '@overview', {
      title: 'Overview',
      section: '/',
      chart: true,
      f,
      openStatuses,
      open: [...byService].map(([s, counts]) => ({ service: s, counts })),
      lag,
      lagError,
      series: {
        hours: f.quarantine.perHour.map((h) => Math.floor(h.hour.getTime() / 1000)),
        counts: f.quarantine.perHour.map((h) => h.count),
      },
    });
  }

  async function jobs(res: ServerResponse, who: Identity | undefined, q: URLSearchParams) {
    const filter = {
      status: q
        .getAll('status')
        .filter((s) => (JOB_STATUSES as readonly string[]).includes(s)) as JobStatus[],
      service: q.get('service') ?? '',
      file: q.get('file') ?? '',
      created_since: q.get('created_since') ?? '',
      finished_since: q.get('finished_since') ?? '',
    };
    const data: Record<string, unknown> = {
      title: 'Jobs',
      section: '/jobs',
      statuses: JOB_STATUSES,
      filter,
      findValue: '',
      jobs: [] as JobRow[],
    };
    try {
      const file = filter.file.trim();
      if (file !== '' && !UUID.test(file)) throw new Answer(400, 'Bad filter', 'a file id is a uuid');
      const before = q.get('before') ?? undefined;
      if (before !== undefined && !UUID.test(before)) throw new Answer(400, 'Bad page', 'bad page cursor');
      const rows = await read((tx) =>
        listJobs(tx, {
          statuses: filter.status,
          service: service(filter.service),
          fileId: file === '' ? undefined : file,
          createdSince: moment(filter.created_since, 'created since'),
          finishedSince: moment(filter.finished_since, 'finished since'),
          before,
          limit: PAGE + 1,
        }),
      );
      data['jobs'] = rows.slice(0, PAGE);
      if (rows.length > PAGE) {
        const next = new URLSearchParams(q);
        next.set('before', rows[PAGE - 1]!.id);
        data['nextPage'] = `/jobs?${next.toString()}`;
      }
      // A bulk retry of what the filter selects: only failed statuses the machine retries.
      const bulkStatuses = (filter.status.length ? filter.status : retryable).filter((s) =>
        (retryable as readonly string[]).includes(s),
      );
      if (can(who, 'retry') && bulkStatuses.length > 0 && file === '' && filter.created_since === '')
        data['bulk'] = { statuses: bulkStatuses };
    } catch (err) {
      if (!(err instanceof Answer)) throw err;
      data['error'] = err.message;
      return page(res, who, '@jobs', data as PageContent, err.status);
    }
    page(res, who, '@jobs', data as PageContent);
  }

  async function find(res: ServerResponse, who: Identity | undefined, q: URLSearchParams) {
    const text = (q.get('id') ?? '').trim();
    const id = text === '' || text.length > 300 ? undefined : await read((tx) => findJobId(tx, text));
    if (id) return redirect(res, `/jobs/${id}`);
    page(
      res,
      who,
      '@jobs',
      {
        title: 'Jobs',
        section: '/jobs',
        statuses: JOB_STATUSES,
        filter: { status: [], service: '', file: '', created_since: '', finished_since: '' },
        findValue: text,
        jobs: [],
        error: `No job, file or message has the id ${JSON.stringify(text)}.`,
      },
      404,
    );
  }

  async function job(res: ServerResponse, who: Identity | undefined, id: string, q: URLSearchParams) {
    if (!UUID.test(id)) return message(res, who, 404, 'No such job', `${id} is not a job id`);
    const found = await read(async (tx) => {
      const view = await loadJob(tx, id);
      if (!view) return undefined;
      return {
        view,
        transitions: await loadTransitions(tx, id),
        attempts: await loadAttempts(tx, view.job.file_id),
      };
    });
    if (!found) return message(res, who, 404, 'No such job', `no recognition_job with id ${id}`);
    const { view, transitions, attempts } = found;
    const j = view.job;
    const fileIsCurrent = view.file.current_recognition_job_id === j.id;
    const steps = [
      {
        state: transitions[0]?.from_status ?? j.status,
        edge: null,
        text: `start in ${transitions[0]?.from_status ?? j.status}`,
      },
      ...transitions.map((t) => ({
        state: t.to_status,
        edge: `edge-${t.from_status}-${t.to_status}-${t.event}`,
        text: `${t.event}: ${t.from_status} → ${t.to_status}`,
      })),
    ];
    const traceOf = (t: TransitionRow) =>
      traceIdOf(t.detail['traceparent']) ??
      (typeof t.detail['trace_id'] === 'string' ? t.detail['trace_id'] : null);
    const retryOf = q.get('retry_of');
    page(res, who, '@job', {
      title: `Job ${j.id}`,
      section: '/jobs',
      job: j,
      notice:
        retryOf && UUID.test(retryOf)
          ? `Attempt ${j.attempt} created: a retry of job ${retryOf}.`
          : undefined,
      fields: [
        ['status', j.status],
        ['attempt', String(j.attempt)],
        ['target service', j.target_service],
        ['answered by', j.service_name ? `${j.service_name} ${j.service_version ?? ''}` : ''],
        ['publish attempts', String(j.publish_attempts)],
        ['created', showTime(j.created_at)],
        ['published', showTime(j.published_at)],
        ['reply deadline', showTime(j.reply_deadline)],
        ['started', showTime(j.started_at)],
        ['finished', showTime(j.finished_at)],
        ['error', [j.error_code, j.error_message].filter(Boolean).join(': ')],
        ['result message id', j.result_msg_id ?? ''],
        ['trace id', traceIdOf(j.trace_parent) ?? ''],
      ],
      fileFields: [
        ['id', view.file.id],
        ['name', view.file.original_name],
        ['status', view.file.status],
        ['current job', view.file.current_recognition_job_id ?? ''],
      ],
      result: view.result,
      attempts,
      currentJobId: view.file.current_recognition_job_id,
      actions: who ? jobActions(graph, { status: j.status, fileIsCurrent }).filter((a) => can(who, a)) : [],
      steps,
      transitions,
      traceOf,
      svg: await svg,
    });
  }

  async function quarantine(res: ServerResponse, who: Identity | undefined, q: URLSearchParams) {
    const reasonText = q.get('reason') ?? '';
    const reason = (QUARANTINE_REASONS as readonly string[]).includes(reasonText)
      ? (reasonText as QuarantineReason)
      : undefined;
    const svc = SERVICE.test(q.get('service') ?? '') ? q.get('service')! : undefined;
    const beforeText = q.get('before') ?? '';
    const beforeId = /^\d{1,19}$/.test(beforeText) ? beforeText : undefined;
    const { groups, messages } = await read(async (tx) => ({
      groups: await quarantineGroups(tx),
      messages: await listQuarantine(tx, {
        reason,
        service: svc,
        beforeId,
        limit: PAGE + 1,
        previewBytes: PREVIEW_BYTES,
      }),
    }));
    let nextPage: string | undefined;
    if (messages.length > PAGE) {
      const next = new URLSearchParams(q);
      next.set('before', messages[PAGE - 1]!.id);
      nextPage = `/quarantine?${next.toString()}`;
    }
    const replayed = q.get('replayed');
    page(res, who, '@quarantine', {
      title: 'Quarantine',
      section: '/quarantine',
      notice: replayed ? `Message ${replayed}: ${q.get('outcome') ?? ''}` : undefined,
      groups,
      messages: messages.slice(0, PAGE),
      nextPage,
      filter: { reason, service: svc },
      reasons: QUARANTINE_REASONS,
      previewBytes: PREVIEW_BYTES,
      canReplay: can(who, 'replay'),
      canPurge: can(who, 'purge'),
    });
  }

  async function services(res: ServerResponse, who: Identity | undefined) {
    const rows = await serviceFigures();
    const pct = (x: number | null | undefined) =>
      x === null || x === undefined ? '—' : `${(x * 100).toFixed(x > 0 && x < 0.01 ? 2 : 1)} %`;
    const ms = (x: number | null) =>
      x === null ? '—' : x < 10_000 ? `${Math.round(x)} ms` : `${(x / 1000).toFixed(1)} s`;
    page(res, who, '@services', {
      title: 'Services',
      section: '/services',
      finalStatuses: FINAL_JOB_STATUSES,
      windows: (['hour', 'day'] as const).map((w) => ({
        window: w,
        rows: rows.filter((r) => r.window === w),
      })),
      pct,
      ms,
    });
  }

  async function audit(res: ServerResponse, who: Identity | undefined, q: URLSearchParams) {
    const beforeText = q.get('before') ?? '';
    const beforeId = /^\d{1,19}$/.test(beforeText) ? beforeText : undefined;
    const rows = await read((tx) => listAudit(tx, { beforeId, limit: PAGE + 1 }));
    page(res, who, '@audit', {
      title: 'Audit',
      section: '/audit',
      rows: rows.slice(0, PAGE),
      nextPage: rows.length > PAGE ? `/audit?before=${rows[PAGE - 1]!.id}` : undefined,
    });
  }

  // -------------------------------------------------------------------------------------------
  // Signing in, and the actions
  // -------------------------------------------------------------------------------------------

  async function login(req: IncomingMessage, res: ServerResponse) {
    if (!sameOrigin(req.headers))
      throw new Answer(403, 'Refused', 'the request does not come from this console');
    const form = await readBody(req);
    const entry = matchToken(readTokens(cfg.CONSOLE_TOKEN_FILE), form.get('token') ?? '');
    if (!entry) {
      logger.warn(
        { event: 'console_login_refused', peer: req.socket.remoteAddress },
        'console sign-in refused',
      );
      return page(
        res,
        undefined,
        '@login',
        { title: 'Sign in', section: '', enabled: true, error: 'That token is not known.' },
        401,
      );
    }
    logger.info({ event: 'console_login', actor: entry.name }, `console: ${entry.name} signed in`);
    redirect(res, '/', { 'set-cookie': sessionCookie(sessions.issue(entry, Date.now()), SESSION_TTL_MS) });
  }

  /** The identity allowed `action`, with a matching CSRF token and origin; else a 403. */
  function authorize(
    req: IncomingMessage,
    who: Identity | undefined,
    form: URLSearchParams,
    action: ConsoleAction,
  ) {
    if (!who)
      throw new Answer(403, 'Read-only', 'this console is read-only without an identity: sign in first');
    if (!sameOrigin(req.headers))
      throw new Answer(403, 'Refused', 'the request does not come from this console');
    if (!csrfMatches(who.csrf, form.get('csrf') ?? undefined))
      throw new Answer(403, 'Refused', 'the form is stale or forged (CSRF token): open the page again');
    if (!who.actions.includes(action)) throw new Answer(403, 'Not allowed', `${who.name} may not ${action}`);
    return who;
  }

  const auditOf = (who: Identity, n: string) => ({ actor: who.name, via: 'console' as const, note: n });

  async function act(req: IncomingMessage, res: ServerResponse, path: string, who: Identity | undefined) {
    const action: Record<string, ConsoleAction> = {
      '/actions/retry': 'retry',
      '/actions/retry-bulk': 'retry',
      '/actions/replay': 'replay',
      '/actions/purge': 'purge',
    };
    const needed = action[path];
    if (!needed) throw new Answer(404, 'Not found', 'no such action');
    // Refused before the body is read: nothing of a request without an identity is taken.
    if (!who)
      throw new Answer(403, 'Read-only', 'this console is read-only without an identity: sign in first');
    const form = await readBody(req);
    const me = authorize(req, who, form, needed);
    if (path === '/actions/retry') {
      const id = form.get('job_id') ?? '';
      if (!UUID.test(id)) throw new Answer(400, 'Bad request', 'job_id must be a job id');
      const n = note(form);
      const requests = await retryRequests(db, { jobId: id });
      const [outcome] = await retryJobs(db, requests, {
        dryRun: false,
        audit: { ...auditOf(me, n), action: 'jobs retry', selection: { job_id: id } },
      });
      logger.info(
        { event: 'console_action', actor: me.name, action: 'jobs retry', job_id: id },
        'console: retry',
      );
      if (!outcome?.next) throw new Answer(409, 'Not retried', refusal(outcome!));
      return redirect(res, `/jobs/${outcome.next.jobId}?retry_of=${id}`);
    }
    if (path === '/actions/retry-bulk') {
      const statuses = form
        .getAll('status')
        .filter((s): s is FailedJobStatus => (retryable as readonly string[]).includes(s));
      if (statuses.length === 0)
        throw new Answer(400, 'Bad request', `choose statuses among ${retryable.join(', ')}`);
      const svc = service(form.get('service') ?? '');
      const sinceText = form.get('finished_since') ?? '';
      const since = moment(sinceText, 'finished since');
      const limit = Number(form.get('limit') ?? '1000');
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
        throw new Answer(400, 'Bad request', 'the limit is a whole number from 1 to 10000');
      const dryRun = form.get('dry_run') === 'true';
      const requests = await retryRequests(db, {
        filter: { statuses, service: svc, finishedSince: since, limit },
      });
      const selection = { status: statuses, service: svc ?? null, since: sinceText || null, limit };
      const outcomes = await retryJobs(db, requests, {
        dryRun,
        audit: dryRun
          ? { ...auditOf(me, ''), action: 'jobs retry', selection }
          : { ...auditOf(me, note(form)), action: 'jobs retry', selection },
      });
      const retried = outcomes.filter((o) => o.next !== null).length;
      const what = `statuses ${statuses.join(', ')}${svc ? `, service ${svc}` : ''}${sinceText ? `, finished since ${sinceText}` : ''}`;
      if (dryRun) {
        return message(
          res,
          me,
          200,
          'Retry: dry run',
          `Would retry ${retried} of ${requests.length} selected job(s) (${what}); nothing was written.`,
          {
            confirm:
              retried > 0
                ? {
                    action: '/actions/retry-bulk',
                    label: `Retry ${retried} job(s)`,
                    fields: [
                      ...statuses.map((s) => ['status', s]),
                      ['service', svc ?? ''],
                      ['finished_since', sinceText],
                      ['limit', String(limit)],
                      ['dry_run', 'false'],
                    ],
                  }
                : undefined,
            links: [['/jobs', 'Back to the jobs']],
          },
        );
      }
      logger.info(
        { event: 'console_action', actor: me.name, action: 'jobs retry', retried },
        'console: bulk retry',
      );
      return message(
        res,
        me,
        200,
        'Retried',
        `Retried ${retried} of ${requests.length} selected job(s) (${what}).`,
        {
          links: [
            ['/jobs?status=pending', 'The pending jobs'],
            ['/audit', 'The audit log'],
          ],
        },
      );
    }
    if (path === '/actions/replay') {
      const id = form.get('id') ?? '';
      if (!/^\d{1,19}$/.test(id)) throw new Answer(400, 'Bad request', 'id must be a quarantine row id');
      const results = await replayQuarantined(db, { id }, cfg, auditOf(me, note(form)));
      logger.info(
        { event: 'console_action', actor: me.name, action: 'quarantine replay', id },
        'console: replay',
      );
      if (results.length === 0) throw new Answer(404, 'Not found', `no inbox_quarantine row with id ${id}`);
      const outcome = `${results[0]!.outcome} (${replaySummary(results.map((r) => r.outcome)).text})`;
      return redirect(res, `/quarantine?${new URLSearchParams({ replayed: id, outcome }).toString()}`);
    }
    // Purge.
    const olderText = form.get('older_than') ?? '';
    const olderThan = moment(olderText, 'received before');
    if (!olderThan) throw new Answer(400, 'Bad request', 'say which messages: received before when');
    const reasonText = form.get('reason') ?? '';
    const reason = (QUARANTINE_REASONS as readonly string[]).includes(reasonText)
      ? (reasonText as QuarantineReason)
      : undefined;
    const dryRun = form.get('dry_run') === 'true';
    const which = { receivedBefore: olderThan, reason };
    const selection = { older_than: olderText, reason: reason ?? null };
    const audited = dryRun ? auditOf(me, '') : auditOf(me, note(form));
    const n = await purgeQuarantined(db, which, selection, { dryRun, audit: audited });
    const what = `received before ${olderText}${reason ? `, reason ${reason}` : ''}`;
    if (dryRun)
      return message(
        res,
        me,
        200,
        'Purge: dry run',
        `Would delete ${n} quarantined message(s) (${what}); nothing was written.`,
        {
          confirm:
            n > 0
              ? {
                  action: '/actions/purge',
                  label: `Delete ${n} message(s)`,
                  fields: [
                    ['older_than', olderText],
                    ['reason', reason ?? ''],
                    ['dry_run', 'false'],
                  ],
                }
              : undefined,
          links: [['/quarantine', 'Back to the quarantine']],
        },
      );
    logger.info(
      { event: 'console_action', actor: me.name, action: 'quarantine purge', deleted: n },
      'console: purge',
    );
    return message(res, me, 200, 'Purged', `Deleted ${n} quarantined message(s) (${what}).`, {
      links: [
        ['/quarantine', 'The quarantine'],
        ['/audit', 'The audit log'],
      ],
    });
  }

  // -------------------------------------------------------------------------------------------
  // Routing
  // -------------------------------------------------------------------------------------------

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    const path = url.pathname;
    const who = identify(sources, { peer: req.socket.remoteAddress, headers: req.headers }, Date.now());
    if (req.method === 'POST') {
      if (path === '/login') return login(req, res);
      if (path === '/logout') {
        const form = await readBody(req);
        if (who && sameOrigin(req.headers) && csrfMatches(who.csrf, form.get('csrf') ?? undefined))
          return redirect(res, '/', { 'set-cookie': sessionCookie(null, 0) });
        throw new Answer(403, 'Refused', 'sign out from the console’s own page');
      }
      return act(req, res, path, who);
    }
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n', {
        allow: 'GET, HEAD, POST',
      });
    const asset = assets[path];
    if (asset) return send(res, 200, asset.type, asset.body, { 'cache-control': 'max-age=3600' });
    if (path.startsWith('/actions/'))
      return send(res, 405, 'text/plain; charset=utf-8', 'actions are POST only\n', { allow: 'POST' });
    if (path === '/') return overview(res, who);
    if (path === '/jobs') return jobs(res, who, url.searchParams);
    if (path === '/find') return find(res, who, url.searchParams);
    const jobPath = /^\/jobs\/([^/]+)$/.exec(path);
    if (jobPath) return job(res, who, decodeURIComponent(jobPath[1]!), url.searchParams);
    if (path === '/quarantine') return quarantine(res, who, url.searchParams);
    if (path === '/services') return services(res, who);
    if (path === '/audit') return audit(res, who, url.searchParams);
    if (path === '/login')
      return page(res, who, '@login', {
        title: 'Sign in',
        section: '',
        enabled: cfg.CONSOLE_TOKEN_FILE !== '',
      });
    return message(res, who, 404, 'Not found', `nothing at ${path}`);
  }

  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      const who = identify(sources, { peer: req.socket.remoteAddress, headers: req.headers }, Date.now());
      if (err instanceof Answer) {
        if (res.headersSent) return res.end();
        // A refusal drains what the client still sends, so it reads the answer.
        req.resume();
        return message(res, who, err.status, err.heading, err.message);
      }
      logger.error({ err, path: req.url?.split('?')[0] }, 'console request failed');
      if (!res.headersSent)
        message(res, who, 500, 'Failed', `the console could not answer: ${(err as Error).message}`);
      else res.end();
    });
  });
  const listener = await listening(server, cfg.CONSOLE_HOST, cfg.CONSOLE_PORT ?? 0);
  logger.info(
    { event: 'console_started', console_port: listener.port },
    `operator console on http://${cfg.CONSOLE_HOST}:${listener.port}/`,
  );
  return listener;
}
