/**
 * The service kit's message module is generated from `schemas/` and fresh: the kit's types and
 * validators are those of the core's contract. `UPDATE_KIT_MESSAGES=1 npx vitest run
 * test/unit/serviceKitMessages.test.ts` rewrites the module (as
 * `node dist/workshop/serviceKit/kitMessages.js` does).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SCHEMA_FILES } from '../../src/messages/schemas.js';
import * as kit from '../../service-kit/src/generated/messages.js';
import { KIT_MESSAGES_FILE, readSchemas, renderKitMessages } from '../../workshop/serviceKit/kitMessages.js';

const path = fileURLToPath(new URL(`../../${KIT_MESSAGES_FILE}`, import.meta.url));

describe('the kit messages module', () => {
  it('is what the schemas give today', async () => {
    const want = await renderKitMessages(await readSchemas());
    if (process.env.UPDATE_KIT_MESSAGES === '1') await writeFile(path, want);
    expect(await readFile(path, 'utf8'), `${KIT_MESSAGES_FILE} is stale`).toBe(want);
  });

  it('embeds the core schemas exactly', () => {
    expect(kit.jobMessageSchema).toEqual(SCHEMA_FILES['recognition-job-message.schema.json']);
    expect(kit.resultEnvelopeSchema).toEqual(SCHEMA_FILES['recognition-result-message.schema.json']);
  });

  it('goes stale when a schema changes: a new field becomes a new member of the type', async () => {
    const schemas = await readSchemas();
    const job = structuredClone(schemas['recognition-job-message.schema.json']!) as {
      properties: Record<string, unknown>;
      required: string[];
    };
    job.properties.priority = { type: 'integer' };
    job.required.push('priority');
    const changed = await renderKitMessages({ ...schemas, 'recognition-job-message.schema.json': job });
    expect(changed).not.toBe(await readFile(path, 'utf8'));
    expect(changed).toMatch(/export type JobMessage = \{[^]*?\n {2}priority: number;/);
  });
});
