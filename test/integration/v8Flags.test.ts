/**
 * The process's V8 settings (`src/process/v8Flags.ts`) take effect where the launcher applies
 * them, after V8 has started: checked in a real child process by their effect, not by reading
 * them back. The control, without them, shows that this V8 does pretenure the same objects, so the
 * test would fail if applying the settings changed nothing. V8 decides to pretenure when a
 * young-generation collection finds enough survivors of a literal, so whether a given run decides
 * depends on when its collections fall: the control is tried up to five times and holds if one of
 * them pretenures, and every run with the settings must keep the objects young.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const BUILT = fileURLToPath(new URL('../../dist/src/process/v8Flags.js', import.meta.url));

/**
 * Whether an object of a literal whose objects have all survived is still born in the young
 * generation, in a new process that applies the settings (`apply`) or not.
 */
function bornYoungAfterSurvivors(apply: boolean): boolean {
  const script = `
    if (${apply}) (await import(${JSON.stringify(BUILT)})).applyV8Flags();
    const make = (i) => ({ i, list: [i] });
    const kept = [];
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < 20000; i++) kept.push(make(i));
      for (let i = 0; i < 5000; i++) new Array(100); // young-generation collections
    }
    console.log(JSON.stringify({ young: %InYoungGeneration(make(0)), kept: kept.length }));
  `;
  const args = ['--allow-natives-syntax', '--input-type=module', '-e', script];
  const out = execFileSync(process.execPath, args, { encoding: 'utf8' });
  const { young, kept } = JSON.parse(out) as { young: boolean; kept: number };
  expect(kept).toBe(800_000);
  return young;
}

describe('the V8 settings', () => {
  it('keep objects of a literal young however many of them survive (no pretenuring)', () => {
    const control: boolean[] = [];
    while (control.length < 5 && !control.includes(false)) control.push(bornYoungAfterSurvivors(false));
    expect(control).toContain(false);
    for (let run = 0; run < 3; run++) expect(bornYoungAfterSurvivors(true)).toBe(true);
  });
});
