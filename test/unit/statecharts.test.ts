/**
 * The statecharts in `visualizations/`: generated from the machine, fresh, complete, and
 * the same graph in every form — Markdown table, SVG, Stately Studio file.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createMachine, type AnyStateMachine } from 'xstate';
import { describe, expect, it } from 'vitest';
import { JOB_EVENT_TYPES, JOB_STATUSES, decide, recognitionJobMachine } from '../../machines/index.js';
import {
  defaultVisualizationsDir,
  findStaleFiles,
  generateStatecharts,
  STATECHART_FILES,
} from '../../workshop/statecharts/generate.js';
import { legalEdges, readMachineGraph, type MachineGraph } from '../../src/statecharts/machineGraph.js';
import {
  buildOverview,
  overviewLabel,
  overviewToDot,
  type Overview,
} from '../../workshop/statecharts/overview.js';
import { drawnEdges, nextAttemptEdges, renderSvg, type DrawnEdge } from '../../src/statecharts/render.js';
import { toMermaid } from '../../workshop/statecharts/renderFiles.js';
import { contextIn, eventVariants } from '../../workshop/machineSamples.js';
import { buildStateEventTable, decideOn } from '../../workshop/statecharts/stateEventTable.js';
import { machine as statelyMachine } from '../../visualizations/recognition-job.stately.js';

const dir = defaultVisualizationsDir();

/** A copy of the lifecycle machine with `change` applied to its config (the real one is untouched). */
function mutatedMachine(
  change: (config: Record<string, unknown> & { states: Record<string, Record<string, unknown>> }) => void,
): AnyStateMachine {
  // A deep copy (JSON: the config is data but for the context factory, put back below).
  const config = JSON.parse(
    JSON.stringify({ ...recognitionJobMachine.config, context: undefined }),
  ) as Record<string, unknown> & {
    states: Record<string, Record<string, unknown>>;
  };
  change(config);
  return createMachine(
    { ...config, context: recognitionJobMachine.config.context } as never,
    recognitionJobMachine.implementations as never,
  ) as unknown as AnyStateMachine;
}

/**
 * Well-formed XML, checked without a parser dependency: one root element, every tag closed in order,
 * attributes quoted and unique, no stray `<` or bare `&` in text. Returns the problems found.
 */
function xmlProblems(xml: string): string[] {
  const problems: string[] = [];
  const body = xml
    .replace(/^<\?xml[^?]*\?>/, '')
    .replace(/<!--[\s\S]*?-->/g, '')
    .replace(/<!DOCTYPE[^>[]*(\[[\s\S]*?\])?\s*>/, '')
    .replace(/<!\[CDATA\[[\s\S]*?\]\]>/g, '');
  const stack: string[] = [];
  let roots = 0;
  const tag = /<(\/?)([A-Za-z_][\w:.-]*)((?:\s+[A-Za-z_][\w:.-]*\s*=\s*(?:"[^"<]*"|'[^'<]*'))*)\s*(\/?)>/y;
  const text = /[^<]*/y;
  let i = 0;
  while (i < body.length) {
    text.lastIndex = i;
    const t = text.exec(body)![0];
    if (/&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)/.test(t))
      problems.push(`bare & in text near ${i}`);
    if (stack.length === 0 && t.trim() !== '') problems.push(`text outside the root near ${i}`);
    i += t.length;
    if (i >= body.length) break;
    tag.lastIndex = i;
    const m = tag.exec(body);
    if (!m) {
      problems.push(`malformed tag near ${i}: ${body.slice(i, i + 40)}`);
      break;
    }
    const [whole, closing, name, attrs, selfClosing] = m;
    const names = [...attrs!.matchAll(/([A-Za-z_][\w:.-]*)\s*=/g)].map((a) => a[1]);
    if (new Set(names).size !== names.length) problems.push(`duplicate attribute in <${name}>`);
    if (/&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)/.test(attrs!))
      problems.push(`bare & in an attribute of <${name}>`);
    if (closing) {
      const open = stack.pop();
      if (open !== name) problems.push(`</${name}> closes <${open ?? 'nothing'}>`);
    } else if (!selfClosing) {
      if (stack.length === 0) roots++;
      stack.push(name!);
    } else if (stack.length === 0) roots++;
    i += whole.length;
  }
  if (stack.length) problems.push(`unclosed: ${stack.join(' > ')}`);
  if (roots !== 1) problems.push(`${roots} root elements`);
  return problems;
}

describe('the generated statecharts', () => {
  it('are fresh: regenerating from the machine gives the committed files', async () => {
    const files = await generateStatecharts();
    expect(Object.keys(files).sort()).toEqual([...STATECHART_FILES].sort());
    expect(await findStaleFiles(dir, files)).toEqual([]);
  });

  it('are reported stale after a change to (a copy of) the machine that is not regenerated', async () => {
    const newEdge = mutatedMachine((c) => {
      const processing = c.states['processing']!;
      processing['on'] = {
        ...(processing['on'] as object),
        DELIVERY_EXHAUSTED: {
          target: 'dlq',
          description: 'no service took the job message: dead letter',
          actions: ['applyDeliveryExhausted', { type: 'recordAndSetFile', params: { file: 'ERROR' } }],
        },
      };
    });
    expect(legalEdges(newEdge)).toContainEqual({ from: 'processing', to: 'dlq' });
    const stale = await findStaleFiles(dir, await generateStatecharts(newEdge));
    expect(stale.map((s) => s.name).sort()).toEqual([...STATECHART_FILES].sort());
    expect(stale.every((s) => s.problem === 'differs' && (s.line ?? 0) > 0)).toBe(true);

    // Words matter too: a changed description alone makes the page and the Studio file stale.
    const reworded = mutatedMachine((c) => {
      c.states['timeout']!['description'] = 'Too slow. The file is ERROR.';
    });
    const names = (await findStaleFiles(dir, await generateStatecharts(reworded))).map((s) => s.name);
    expect(names).toContain('recognition-job.md');
    expect(names).toContain('recognition-job.stately.ts');

    // A new state shows everywhere.
    const newState = mutatedMachine((c) => {
      c.states['on_hold'] = {
        description: 'Held by an operator.',
        tags: ['final'],
        on: c.states['done']!['on'],
      };
    });
    expect(
      (await findStaleFiles(dir, await generateStatecharts(newState))).map((s) => s.name).sort(),
    ).toEqual([...STATECHART_FILES].sort());
  });

  it('name a missing file', async () => {
    const files = await generateStatecharts();
    expect(await findStaleFiles(join(dir, 'no-such-folder'), files)).toEqual(
      STATECHART_FILES.map((name) => ({ name, problem: 'missing' })),
    );
  });
});

describe('the state × event table (recognition-job.md)', () => {
  const graph = readMachineGraph();
  const rows = buildStateEventTable();

  it('has a row for every (state × event) pair of the machine, in the committed file too', async () => {
    const md = await readFile(join(dir, 'recognition-job.md'), 'utf8');
    const tableLines = md.split('\n').filter((l) => /^\| `[a-z_]+` \| `[A-Z_]+`/.test(l));
    expect(graph.states.map((s) => s.name)).toEqual([...JOB_STATUSES]);
    for (const state of JOB_STATUSES) {
      for (const event of JOB_EVENT_TYPES) {
        expect(
          rows.filter((r) => r.state === state && r.event === event).length,
          `${state} × ${event}`,
        ).toBeGreaterThan(0);
        expect(
          tableLines.filter((l) => l.startsWith(`| \`${state}\` | \`${event}\``)).length,
          `${state} × ${event} in the file`,
        ).toBeGreaterThan(0);
      }
    }
    expect(rows).toHaveLength(JOB_STATUSES.length * eventVariants().length);
    expect(tableLines).toHaveLength(rows.length);
  });

  it('exercises every transition of the machine at least once', () => {
    const taken = new Set(
      rows.map((r) => r.transition && `${r.transition.source}|${r.transition.event}|${r.transition.order}`),
    );
    for (const t of graph.transitions) {
      // A root fallback is exercised when some state does not take its event.
      expect(
        taken.has(`${t.source}|${t.event}|${t.order}`),
        `${t.source ?? '(root)'} ${t.event} #${t.order}`,
      ).toBe(true);
    }
  });

  it("computes each row's outcome exactly as decide() does", () => {
    for (const state of JOB_STATUSES) {
      for (const v of eventVariants()) {
        const context = contextIn(state, v.context);
        const expected = decide({ status: state, context }, v.event);
        const actual = decideOn(recognitionJobMachine, state, context, v.event);
        expect(actual, `${state} × ${v.name}`).toEqual(expected);
        const row = rows.find((r) => r.state === state && r.event === v.type && r.variant === v.label)!;
        expect({ to: row.to, decision: row.decision, reason: row.reason, effects: row.effects }).toEqual({
          to: expected.to,
          decision: expected.decision,
          reason: expected.reason,
          effects: expected.effects,
        });
      }
    }
  });

  it('logs each decision at the level the daemon uses', () => {
    const level = Object.fromEntries(rows.map((r) => [r.decision, r.level]));
    expect(level).toEqual({
      applied: 'info',
      duplicate: 'debug',
      ignored: 'info',
      late: 'warn',
      rejected: 'warn',
    });
  });

  it('lists every final status with what it means for the file', async () => {
    const md = await readFile(join(dir, 'recognition-job.md'), 'utf8');
    const section = md.slice(md.indexOf('## Final statuses'), md.indexOf('## Legal status changes'));
    for (const s of graph.states.filter((x) => x.final))
      expect(section).toContain(`- **${s.name}**: ${s.description}`);
    expect(md).toContain('```mermaid\nstateDiagram-v2');
    for (const s of graph.states.filter((x) => x.final)) expect(md).toContain(`  ${s.name} --> [*]`);
  });
});

describe('how attempts chain', () => {
  it("marks a next attempt from exactly the statuses whose decisions return createAttempt, to the machine's initial status", () => {
    const starting = buildStateEventTable()
      .filter((r) => r.effects.some((e) => e.type === 'createAttempt'))
      .map((r) => r.state);
    expect([...new Set(starting)]).toEqual(['error', 'timeout', 'dlq']);
    const graph = readMachineGraph();
    expect(nextAttemptEdges(graph).map((e) => [e.from, e.to, e.event])).toEqual(
      [...new Set(starting)].map((s) => [s, graph.initial, 'RETRY_REQUESTED']),
    );
  });

  it('draws them dashed in both diagrams, notes them in Mermaid and explains them on the page', async () => {
    const graph = readMachineGraph();
    const files = await generateStatecharts();
    for (const name of ['recognition-job.svg', 'recognition-job.overview.svg'] as const)
      for (const from of ['error', 'timeout', 'dlq'])
        expect(files[name]).toContain(`id="next&#45;attempt&#45;${from}"`);
    expect(toMermaid(graph)).toContain(
      'note right of timeout : RETRY_REQUESTED starts a new job (attempt + 1) in pending',
    );
    expect(files['recognition-job.md']).toMatch(
      /## How attempts chain[\s\S]*attempt \+ 1, starts in `pending`/,
    );
  });
});

describe('the SVG (recognition-job.svg)', () => {
  it('is well-formed XML and names every state', async () => {
    const svg = await readFile(join(dir, 'recognition-job.svg'), 'utf8');
    expect(xmlProblems(svg)).toEqual([]);
    expect(svg).toMatch(/<svg[\s>]/);
    for (const state of JOB_STATUSES) expect(svg).toContain(`<title>${state}</title>`);
  });

  it('the checker itself rejects broken XML', () => {
    expect(xmlProblems('<svg><g></svg>')).not.toEqual([]);
    expect(xmlProblems('<svg a="1" a="2"/>')).not.toEqual([]);
    expect(xmlProblems('<svg>R&D</svg>')).not.toEqual([]);
    expect(xmlProblems('<svg/><svg/>')).not.toEqual([]);
    expect(xmlProblems('<svg><g a="x &amp; y">R&amp;D</g></svg>')).toEqual([]);
  });
});

describe('the overview (recognition-job.overview.svg)', () => {
  const key = (e: DrawnEdge) => `${e.from}|${e.to}|${e.event}|${e.order}`;

  /** The rules every overview keeps, on any machine: returns what breaks them. */
  function overviewProblems(graph: MachineGraph, overview: Overview): string[] {
    const problems: string[] = [];
    // Every drawn transition is exactly one label part of exactly one overview edge.
    const parts = overview.edges.flatMap((e) => e.parts.map((p) => ({ e, p })));
    for (const d of drawnEdges(graph)) {
      const n = parts.filter(({ p }) => key(p.edge) === key(d)).length;
      if (n !== 1) problems.push(`${key(d)} is ${n} parts`);
    }
    if (parts.length !== drawnEdges(graph).length) problems.push('a part stands for no drawn edge');
    for (const { e, p } of parts) {
      if (p.edge.from !== e.from || p.edge.event !== e.event)
        problems.push(`${key(p.edge)} on the wrong edge`);
      // A merged edge names each status it stands for; a single edge reaches its own state.
      if (e.group) {
        if (!e.group.states.includes(p.edge.to)) problems.push(`${key(p.edge)} outside its group`);
        if (!overviewLabel(e).split('\n')[1]!.split(' | ').includes(p.edge.to))
          problems.push(`${overviewLabel(e)} does not name ${p.edge.to}`);
      } else if (e.to !== p.edge.to) problems.push(`${key(p.edge)} drawn to ${e.to}`);
    }
    // No bundle is left: one source and event reach at most one other state or group.
    const heads = new Map<string, Set<string>>();
    for (const e of overview.edges.filter((x) => x.to !== x.from)) {
      const k = `${e.from}|${e.event}`;
      heads.set(k, (heads.get(k) ?? new Set()).add(e.to));
    }
    for (const [k, to] of heads)
      if (to.size > 1) problems.push(`${k} still fans out to ${[...to].join(', ')}`);
    // Groups are disjoint and hold states of the graph.
    const grouped = overview.groups.flatMap((g) => g.states);
    if (new Set(grouped).size !== grouped.length) problems.push('a state is in two groups');
    for (const s of grouped) if (!graph.states.some((x) => x.name === s)) problems.push(`${s} is no state`);
    return problems;
  }

  it('folds each result bundle of the lifecycle into one edge per source naming the reported statuses', () => {
    const graph = readMachineGraph();
    const overview = buildOverview(graph);
    expect(overviewProblems(graph, overview)).toEqual([]);
    expect(overview.groups.map((g) => g.states)).toEqual([['done', 'needs_check', 'error']]);
    const merged = overview.edges.filter((e) => e.group);
    expect(merged.map((e) => [e.from, e.event, overviewLabel(e)])).toEqual(
      ['pending', 'published', 'processing'].map((from) => [
        from,
        'ENVELOPE_RESULT',
        'ENVELOPE_RESULT\ndone | needs_check | error',
      ]),
    );
    // The nine result edges of the full chart are three in the overview; the others stay one to one.
    expect(drawnEdges(graph).length - overview.edges.length).toBe(6);
    expect(overview.edges.find((e) => e.from === 'pending' && e.to === 'pending')?.parts[0]?.text).toBe(
      '[else]',
    );
  });

  it('follows the machine: a new reported status and a new bundle appear without an edit', async () => {
    const changed = mutatedMachine((c) => {
      c.states['on_hold'] = {
        description: 'Held by an operator.',
        tags: ['final'],
        on: c.states['done']!['on'],
      };
      const processing = c.states['processing']!['on'] as Record<string, unknown[]>;
      processing['ENVELOPE_RESULT'] = [
        ...processing['ENVELOPE_RESULT']!,
        { guard: 'fileIsCurrent', target: 'on_hold', description: 'held', actions: [] },
      ];
      const published = c.states['published']!['on'] as Record<string, unknown[]>;
      published['DEADLINE_PASSED'] = [
        published['DEADLINE_PASSED']![0]!,
        { target: 'dlq', description: 'no reply: dead letter', actions: [] },
      ];
    });
    const graph = readMachineGraph(changed);
    const overview = buildOverview(graph);
    expect(overviewProblems(graph, overview)).toEqual([]);
    expect(overview.groups.map((g) => g.states)).toEqual([
      ['done', 'needs_check', 'error', 'on_hold'],
      ['timeout', 'dlq'],
    ]);
    const label = (from: string, event: string) =>
      overviewLabel(overview.edges.find((e) => e.from === from && e.event === event && e.group)!);
    expect(label('processing', 'ENVELOPE_RESULT')).toBe(
      'ENVELOPE_RESULT\ndone | needs_check | error | on_hold',
    );
    expect(label('pending', 'ENVELOPE_RESULT')).toBe('ENVELOPE_RESULT\ndone | needs_check | error');
    expect(label('published', 'DEADLINE_PASSED')).toBe('DEADLINE_PASSED\ntimeout | dlq');
    const svg = await renderSvg(overviewToDot(overview));
    expect(xmlProblems(svg)).toEqual([]);
    for (const g of overview.groups) expect(svg).toContain(`<title>${g.id}</title>`);
    expect(svg).toContain('<title>on_hold</title>');
  });

  it('is well-formed XML that draws every state, the groups and every overview edge, and is shown first', async () => {
    const svg = await readFile(join(dir, 'recognition-job.overview.svg'), 'utf8');
    expect(xmlProblems(svg)).toEqual([]);
    for (const state of JOB_STATUSES) expect(svg).toContain(`<title>${state}</title>`);
    const overview = buildOverview(readMachineGraph());
    for (const g of overview.groups) expect(svg).toContain(`<title>${g.id}</title>`);
    const drawnIds = [...svg.matchAll(/<g id="(overview&#45;edge[^"]*)"/g)].length;
    expect(drawnIds).toBe(overview.edges.length);
    for (const e of overview.edges.filter((x) => x.group))
      expect(svg).toContain(overviewLabel(e).split('\n')[1]);

    const md = await readFile(join(dir, 'recognition-job.md'), 'utf8');
    const image = md.indexOf('](recognition-job.overview.svg)');
    expect(image).toBeGreaterThan(0);
    expect(image).toBeLessThan(md.indexOf('```mermaid'));
    expect(md).toContain('](recognition-job.svg)');
  });
});

describe('the Stately Studio file (recognition-job.stately.ts)', () => {
  it('loads as a machine with the same states, edges, guards and descriptions as the real one', () => {
    const real = readMachineGraph(recognitionJobMachine);
    const studio = readMachineGraph(statelyMachine as unknown as AnyStateMachine);
    expect(studio.states).toEqual(real.states);
    expect(studio.initial).toBe(real.initial);
    expect(studio.transitions).toEqual(real.transitions);
    expect(legalEdges(statelyMachine as unknown as AnyStateMachine)).toEqual(legalEdges());
  });

  it('is self-contained: it imports only createMachine from xstate', async () => {
    const source = await readFile(join(dir, 'recognition-job.stately.ts'), 'utf8');
    expect(source.match(/^import .*$/gm)).toEqual(["import { createMachine } from 'xstate';"]);
    expect(source).toContain('export const machine = createMachine({');
  });
});
