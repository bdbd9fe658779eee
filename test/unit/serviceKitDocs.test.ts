/**
 * docs/contract.md opens with a service written with the kit; the block there is the example the
 * integration test runs (`service-kit/examples/exampleService.ts`, its `service` region, imported
 * from the package instead of the kit's sources), and it is a service in thirty lines.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const read = (path: string) => readFileSync(fileURLToPath(new URL(`../../${path}`, import.meta.url)), 'utf8');

const region = read('service-kit/examples/exampleService.ts')
  .split('// #region service\n')[1]!
  .split('// #endregion service')[0]!;

describe('the service in thirty lines', () => {
  it('is the example file, as docs/contract.md shows it', () => {
    const docs = read('docs/contract.md');
    const section = docs.split('## A service in thirty lines\n')[1]!;
    const block = /```ts\n([^]*?)```/.exec(section)?.[1];
    expect(block).toBe(region.replace("'../src/index.js'", "'@recognition/service-kit'"));
  });

  it('takes at most thirty lines, and its handler fewer', () => {
    const lines = region.split('\n').filter((l) => l.trim() !== '');
    expect(lines.length).toBeLessThanOrEqual(30);
    const handler = region.slice(region.indexOf('handle:'), region.indexOf('\n  },\n') + 5).split('\n');
    expect(handler.length).toBeGreaterThan(3);
    expect(handler.length).toBeLessThanOrEqual(30);
  });
});
