/**
 * Renderers of the committed statecharts in `visualizations/`: the Mermaid diagram, the product
 * owners' Markdown page and the Stately Studio file. The diagrams' DOT and SVG, which the daemon's
 * live page draws too, come from `src/statecharts/render.ts`.
 */
import { ATTEMPT_CREATED_EVENT } from '../../machines/index.js';
import { graphEvents, type GraphTransition, type MachineGraph } from '../../src/statecharts/machineGraph.js';
import {
  drawnEdges,
  guardLabel,
  nextAttemptEdges,
  statelyConfig,
  type Json,
} from '../../src/statecharts/render.js';
import type { Overview } from './overview.js';
import type { TableRow } from './stateEventTable.js';

/** Where the generated files say they come from. */
const SOURCE = 'machines/recognitionJob.machine.ts';
const REGENERATE = '`npm run statecharts`';
/** The diagrams the page links to, beside it in `visualizations/`. */
export const FULL_SVG = 'recognition-job.svg';
export const OVERVIEW_SVG = 'recognition-job.overview.svg';

function edgeLabel(t: GraphTransition): string {
  const g = guardLabel(t);
  return g ? `${t.event} [${g}]` : t.event;
}

// ---------------------------------------------------------------------------------------------
// Mermaid and Markdown
// ---------------------------------------------------------------------------------------------

/** A Mermaid `stateDiagram-v2` (no `:` or `;` inside labels: Mermaid ends a label there). */
export function toMermaid(graph: MachineGraph): string {
  const lines = ['stateDiagram-v2', `  [*] --> ${graph.initial}`];
  for (const e of drawnEdges(graph))
    lines.push(`  ${e.from} --> ${e.to} : ${edgeLabel(e).replace(/[:;]/g, ' ')}`);
  for (const s of graph.states) if (s.final) lines.push(`  ${s.name} --> [*]`);
  for (const e of nextAttemptEdges(graph))
    lines.push(`  note right of ${e.from} : ${e.event} starts a new job (attempt + 1) in ${e.to}`);
  return lines.join('\n');
}

function cell(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function guardCell(r: TableRow): string {
  if (!r.transition) return 'no transition';
  const t = r.transition;
  const words = t.description || '(no description)';
  const guard = t.guard ? ` — guard \`${t.guard}\`` : '';
  const fallback = r.via === 'root' ? ' — any state that does not take this event' : '';
  const failed = r.failedGuards.length
    ? `; checked first, not holding: ${r.failedGuards.map((g) => `\`${g}\``).join(', ')}`
    : '';
  return `${words}${guard}${fallback}${failed}`;
}

function decisionCell(r: TableRow): string {
  return `${r.decision}${r.reason ? ` (${r.reason})` : ''}, logged at ${r.level}`;
}

/** `a`, `a or b`, `a, b or c` (each in backticks). */
function orList(items: string[]): string {
  const ticked = items.map((i) => `\`${i}\``);
  return ticked.length < 2 ? ticked.join('') : `${ticked.slice(0, -1).join(', ')} or ${ticked.at(-1)}`;
}

/** What the overview's arrows into a group stand for, one sentence per event and group. */
function overviewSentences(overview: Overview): string[] {
  const byFan = new Map<string, { event: string; sources: string[]; targets: string[]; guards: string[] }>();
  for (const e of overview.edges) {
    if (!e.group) continue;
    const targets = e.parts.map((p) => p.text);
    const key = `${e.event}\u0000${targets.join('|')}`;
    const fan = byFan.get(key) ?? { event: e.event, sources: [], targets, guards: [] };
    fan.sources.push(e.from);
    for (const p of e.parts) {
      const g = guardLabel(p.edge);
      if (g && !fan.guards.includes(g)) fan.guards.push(g);
    }
    byFan.set(key, fan);
  }
  return [...byFan.values()].map(
    (f) =>
      `\`${f.event}\` from ${orList(f.sources)} moves the job to ${orList(f.targets)}, whichever its guard picks` +
      (f.guards.length ? ` (${f.guards.map((g) => `\`${g}\``).join(', ')})` : '') +
      '.',
  );
}

/** How attempts chain: the page's section on retries, from the next-attempt edges. */
function attemptsSection(graph: MachineGraph): string[] {
  const edges = nextAttemptEdges(graph);
  if (edges.length === 0) return [];
  const events = [...new Set(edges.map((e) => e.event))];
  return [
    '## How attempts chain',
    '',
    `A job is one attempt. A job in ${orList(edges.map((e) => e.from))} that is still its file's current job takes`,
    `${orList(events)} (\`recognition-core jobs retry\`): it keeps its status and logs the event with the new job's`,
    `id (\`next_job_id\`, \`next_attempt\`), and a new job for the same file, attempt + 1, starts in \`${graph.initial}\``,
    `with a first log row \`${graph.initial} → ${graph.initial}\`, event \`${ATTEMPT_CREATED_EVENT}\`, naming the job it retries (\`retry_of\`).`,
    "The file points at the new job and is `QUEUED` again. A job that is no longer its file's current one is not",
    'retried (the file already has a newer attempt), so retrying twice never opens two attempts for one file. The',
    'dashed arrows of the diagrams mark where the next attempt starts; no job moves along them.',
    '',
  ];
}

/** What the product owners' page is made of. */
export interface MarkdownInput {
  graph: MachineGraph;
  /** The state × event table. */
  rows: TableRow[];
  /** The legal status changes. */
  edges: Array<{ from: string; to: string }>;
  /** The overview drawn in `recognition-job.overview.svg`. */
  overview: Overview;
}

/**
 * The product owners' page: the overview, the full diagram, the states, the final statuses and
 * the full table.
 */
export function renderMarkdown({ graph, rows, edges, overview }: MarkdownInput): string {
  const out: string[] = [];
  out.push(
    `<!-- Generated from ${SOURCE} by \`recognition-core statecharts\`. Do not edit: run ${REGENERATE}. -->`,
  );
  out.push('', '# The recognition job lifecycle', '', graph.description, '');
  out.push(
    'Every job starts `' +
      graph.initial +
      '` and ends in one of the final statuses. The diagram, the tables and the',
    "database's list of legal status changes are all generated from the machine the daemon runs.",
    '',
    '## Overview',
    '',
    `![The lifecycle: one arrow per status and event](${OVERVIEW_SVG})`,
    '',
    'Each arrow is an event, with its condition in brackets. An arrow into a dashed box stands for one arrow to',
    'each status its label names:',
    '',
    ...overviewSentences(overview).map((line) => `- ${line}`),
    '',
    '## Full diagram',
    '',
    `Every transition on its own arrow (also drawn as [\`${FULL_SVG}\`](${FULL_SVG})):`,
    '',
    '```mermaid',
    toMermaid(graph),
    '```',
    '',
    'A label reads `EVENT [guard]`: the event, and the condition that must hold (see the table for it in plain',
    'words). An arrow from a status back to itself changes nothing but the log (a publish retry, a retry of a',
    'failed job).',
    '',
    ...attemptsSection(graph),
    '## Statuses',
    '',
    '| Status | Final | Meaning |',
    '|---|---|---|',
  );
  for (const s of graph.states)
    out.push(`| \`${s.name}\` | ${s.final ? 'yes' : 'no'} | ${cell(s.description)} |`);
  out.push('', '## Final statuses and what they mean for the file', '');
  out.push(
    'A job in a final status never changes again. Events that still arrive are logged and counted, never applied;',
    'a retry of a failed job leaves it as it is and starts a new job (see "How attempts chain").',
    '',
  );
  for (const s of graph.states.filter((x) => x.final)) out.push(`- **${s.name}**: ${s.description}`);
  out.push('', '## Legal status changes', '');
  out.push(
    'The database refuses any other change of `recognition_job.status`: a trigger (migrations `0002_legal_edges`',
    'and `0004_edge_check_in_when`) rejects a change missing from the table `recognition_job_edge`.',
    '',
    '| From | To |',
    '|---|---|',
  );
  for (const e of edges) out.push(`| \`${e.from}\` | \`${e.to}\` |`);
  out.push('', '## Every event in every status', '');
  out.push(
    'One row per status and event (events with several outcomes have one row per outcome). Columns:',
    '',
    '- **When (guard)**: the condition, in plain words, of the transition the machine takes; "any state that does not',
    '  take this event" marks the machine-wide fallback.',
    '- **File**: the new `stored_file.status`; "if still this job\'s file" means only while the file\'s current job is',
    '  this one (a newer attempt owns the file otherwise).',
    '- **S3 object**: whether a result object is registered in `s3_object`.',
    '- **Transition log**: whether a `recognition_job_transition` row is appended.',
    '- **Decision**: what the daemon counts, with the reason when nothing changed, and the level the inbox logs it',
    '  at: `applied` info, `duplicate` debug, `ignored` info, `late` warn, `rejected` warn (the inbox quarantines a',
    '  rejected envelope as `SERVICE_MISMATCH`). (The watchdog logs a tick that changes nothing at debug, and a dead',
    '  letter at warn.)',
    '',
    '| Status | Event | When (guard) | Next status | File | S3 object | Transition log | Decision |',
    '|---|---|---|---|---|---|---|---|',
  );
  for (const r of rows) {
    const next = r.to === r.state ? `\`${r.to}\` (stays)` : `**\`${r.to}\`**`;
    out.push(
      `| \`${r.state}\` | \`${r.event}\`: ${cell(r.variant)} | ${cell(guardCell(r))} | ${next} | ${cell(r.file)} | ${cell(r.s3)} | ${cell(r.log)} | ${cell(decisionCell(r))} |`,
    );
  }
  out.push(
    '',
    `Events: ${graphEvents(graph)
      .map((e) => `\`${e}\``)
      .join(', ')}.`,
    '',
  );
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Stately Studio
// ---------------------------------------------------------------------------------------------

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** A JSON value as a TypeScript literal: unquoted identifier keys, two-space indent, trailing commas. */
function literal(value: Json, indent: string): string {
  if (typeof value === 'string') return /['\\\n\r]/.test(value) ? JSON.stringify(value) : `'${value}'`;
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  const inner = indent + '  ';
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== 'object'))
      return `[${value.map((v) => literal(v, inner)).join(', ')}]`;
    return `[\n${value.map((v) => `${inner}${literal(v, inner)},\n`).join('')}${indent}]`;
  }
  const entries = Object.entries(value);
  if (entries.length === 0) return '{}';
  if (
    entries.every(
      ([, v]) =>
        v === null ||
        typeof v !== 'object' ||
        (!Array.isArray(v) && Object.values(v).every((x) => x === null || typeof x !== 'object')),
    )
  ) {
    const inline = `{ ${entries.map(([k, v]) => `${IDENT.test(k) ? k : `'${k}'`}: ${literal(v, inner).replace(/\n\s*/g, ' ').replace(/, }/g, ' }')}`).join(', ')} }`;
    if (indent.length + inline.length <= 100) return inline;
  }
  return `{\n${entries.map(([k, v]) => `${inner}${IDENT.test(k) ? k : `'${k}'`}: ${literal(v, inner)},\n`).join('')}${indent}}`;
}

/** A self-contained file Stately Studio imports ("Import from code"): one `createMachine` call. */
export function renderStatelyFile(graph: MachineGraph): string {
  return [
    `// Generated from ${SOURCE} by \`recognition-core statecharts\`. Do not edit: run ${REGENERATE}.`,
    '// Stately Studio: create a machine, choose "Import from code", paste this file. Guards and actions are',
    '// named only (their code lives in the machine); final statuses are plain states tagged `final`,',
    '// because the daemon still reports events that reach a finished job.',
    "import { createMachine } from 'xstate';",
    '',
    `export const machine = createMachine(${literal(statelyConfig(graph), '')});`,
    '',
  ].join('\n');
}
