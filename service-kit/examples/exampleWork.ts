/**
 * Stand-ins for what a team's service does itself, so that the example runs anywhere: reading and
 * recognising the uploaded file, and storing the result file. The recognition is decided by the
 * file's name: `.csv` and `.xlsx` are tables, a name with `scan` in it is read with low confidence,
 * a name with `flaky` in it fails on its first read (the kit runs the handler again). It takes
 * `EXAMPLE_WORK_MS` (default 100) per file. The result files go under `EXAMPLE_RESULTS_DIR`
 * (default: a directory in the system's temporary one).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { S3Ref } from '../src/index.js';

/** What the recognition found. */
export interface Table {
  rows: string[][];
  confidence: number;
}

/** The format of a file this service reads, or undefined. */
export function formatOf(key: string): 'csv' | 'xlsx' | undefined {
  const m = /\.(csv|xlsx)$/i.exec(key);
  return m ? (m[1]!.toLowerCase() as 'csv' | 'xlsx') : undefined;
}

const failedOnce = new Set<string>();

/** Read and recognise the file at `source`. */
export async function recognise(source: S3Ref, format: 'csv' | 'xlsx'): Promise<Table> {
  await new Promise((r) => setTimeout(r, Number(process.env.EXAMPLE_WORK_MS ?? 100)));
  if (/flaky/.test(source.key) && !failedOnce.has(source.key)) {
    failedOnce.add(source.key);
    throw new Error(`reading s3://${source.bucket}/${source.key} timed out`);
  }
  return {
    rows: [
      ['format', format],
      ['file', source.key],
    ],
    confidence: /scan/.test(source.key) ? 0.6 : 0.98,
  };
}

/** Store `body` at `where` (a local directory standing in for S3). */
export async function store(where: S3Ref, body: string): Promise<void> {
  const root = process.env.EXAMPLE_RESULTS_DIR ?? join(tmpdir(), 'recognition-example-results');
  const path = join(root, where.bucket, where.key);
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, body);
}
