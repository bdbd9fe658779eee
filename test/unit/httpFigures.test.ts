/**
 * The HTTP figures' loop, with a read of the test's own: it reads once per interval whatever the
 * requests, one read at a time, keeps the last figures when a read fails, and serves them from
 * memory. `/metrics` shows them with their time and whether each is an estimate.
 */
import { describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/database.js';
import type { DbFigures } from '../../src/db/figures.js';
import { startHttpFigures } from '../../src/http/figures.js';
import { METRICS_REUSE_MS, startHttpServer } from '../../src/http/server.js';
import { Registry } from 'prom-client';
import { createLogger } from '../../src/logger.js';
import { createMetrics } from '../../src/metrics.js';

const logger = createLogger({ level: 'silent' });
const noDb = {} as Db;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const figuresAt = (at: Date, done: number): DbFigures => ({
  at,
  jobs: [
    { status: 'pending', count: 1, exact: true },
    { status: 'done', count: done, exact: false },
  ],
  transitions: [],
});

describe('startHttpFigures', () => {
  it('reads once per interval, one read at a time, however often the figures are asked for', async () => {
    let reads = 0;
    let inFlight = 0;
    let maxInFlight = 0;
    const figures = startHttpFigures({
      db: noDb,
      intervalMs: 100,
      logger,
      read: async () => {
        reads++;
        maxInFlight = Math.max(maxInFlight, ++inFlight);
        await sleep(30);
        inFlight--;
        return figuresAt(new Date(), reads);
      },
    });
    await figures.first;
    const started = Date.now();
    let asked = 0;
    while (Date.now() - started < 550) {
      for (let i = 0; i < 200; i++) if (figures.current()) asked++;
      await sleep(5);
    }
    const elapsed = Date.now() - started;
    await figures.stop();
    expect(asked).toBeGreaterThan(10_000);
    // The first read, then one per interval started.
    expect(reads).toBeLessThanOrEqual(Math.floor(elapsed / 100) + 2);
    expect(reads).toBeGreaterThanOrEqual(2);
    expect(maxInFlight).toBe(1);
  });

  it('keeps the last figures when a read fails, and says why', async () => {
    let fail = false;
    const results: boolean[] = [];
    const at = new Date('2026-01-02T03:04:05Z');
    const figures = startHttpFigures({
      db: noDb,
      intervalMs: 20,
      logger,
      onRead: (ok) => results.push(ok),
      read: () =>
        fail ? Promise.reject(new Error('connection refused')) : Promise.resolve(figuresAt(at, 7)),
    });
    await figures.first;
    expect(figures.current()?.at).toEqual(at);
    fail = true;
    await sleep(100);
    expect(results).toContain(false);
    expect(figures.current()?.jobs.find((j) => j.status === 'done')?.count).toBe(7);
    expect(figures.lastError()).toBe('connection refused');
    await figures.stop();
  });

  it('shows on /metrics the figures, their time, and which are estimates', async () => {
    const at = new Date('2026-01-02T03:04:05Z');
    const metrics = createMetrics(
      { jobsByStatus: () => Promise.resolve(figuresAt(at, 900_000)) },
      { defaultMetrics: false },
    );
    const text = await metrics.registry.metrics();
    expect(text).toContain('recognition_jobs{status="done"} 900000');
    expect(text).toContain('recognition_jobs_estimated{status="done"} 1');
    expect(text).toContain('recognition_jobs_estimated{status="pending"} 0');
    expect(text).toContain(`recognition_http_figures_timestamp_seconds ${at.getTime() / 1000}`);
    expect(text).toContain('recognition_http_figures_reads_total{result="failed"} 0');
  });
});

describe('GET /metrics', () => {
  it('renders one body for a burst of concurrent scrapes, and a fresh one after the reuse time', async () => {
    const registry = new Registry();
    let renders = 0;
    const metrics = registry.metrics.bind(registry);
    registry.metrics = () => {
      renders++;
      return metrics();
    };
    const http = await startHttpServer({ host: '127.0.0.1', port: 0, logger, registry, readiness: {} });
    try {
      const scrape = () => fetch(`http://127.0.0.1:${http.port}/metrics`).then((r) => r.status);
      const started = Date.now();
      const statuses = await Promise.all(Array.from({ length: 200 }, scrape));
      const elapsed = Date.now() - started;
      expect(statuses.every((s) => s === 200)).toBe(true);
      // One render per reuse time the burst lasted (one, unless the machine stalls).
      expect(renders).toBeLessThanOrEqual(Math.floor(elapsed / METRICS_REUSE_MS) + 1);
      const before = renders;
      await sleep(METRICS_REUSE_MS + 50);
      await scrape();
      expect(renders).toBe(before + 1);
    } finally {
      await http.close();
    }
  });
});
