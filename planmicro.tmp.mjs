import { randomUUID } from 'node:crypto';
const dist = process.argv[2] ?? './dist';
const { planBatch, checkingReads } = await import(`${dist}/src/step/plan.js`);
const { decodeEnvelope } = await import(`${dist}/src/messages/decodeEnvelope.js`);
const { envelopeToJobEvent } = await import(`${dist}/src/messages/envelopeToJobEvent.js`);
const NOW = Date.now();
const batches = [];
for (let b = 0; b < 50; b++) {
  const rows = [], datas = [];
  for (let i = 0; i < 100; i++) {
    const id = randomUUID(), file = randomUUID();
    rows.push({ id, file_id: file, attempt: 1, target_service: 'tabular-parser', status: 'processing', publish_attempts: 1,
      reply_deadline: String(NOW + 600000), result_msg_id: null, file_is_current: true, db_now: String(NOW), row_address: `(${b},${i})`, version: String(1000 + b) });
    datas.push({ id, data: new TextEncoder().encode(JSON.stringify({ job_id: id, status: 'done', service: { name: 'tabular-parser', version: '2.3.1' },
      result_s3: { bucket: 'arm-ka', key: `results/${file}/${id}/result.json` }, result_schema_version: '1.0', metrics: { pages: 2, duration_ms: 420 }, sent_at: new Date().toISOString() })) });
  }
  batches.push({ rows, datas });
}
const mode = process.argv[3] ?? 'plan';
let sink = 0;
for (let r = 0; r < 8; r++) {
  const t0 = process.hrtime.bigint(); let n = 0;
  for (let k = 0; k < 4; k++) for (const { rows, datas } of batches) {
    const items = [];
    for (const d of datas) {
      const dec = decodeEnvelope({ data: d.data, msgId: `result:${d.id}:1`, maxBytes: 1 << 20 });
      items.push(envelopeToJobEvent(dec.envelope, dec.msgId));
    }
    if (mode === 'decode') { sink += items.length; n += items.length; continue; }
    const { outcomes, write } = planBatch(rows).next(items);
    const params = checkingReads(write, rows);
    sink += params.length + outcomes.length; n += items.length;
  }
  const us = Number(process.hrtime.bigint() - t0) / 1000 / n;
  if (r >= 3) console.log(mode, 'µs/env', us.toFixed(2));
}
if (mode === 'bytes') {
  const { WRITE_PARAMETERS, WRITE_PARTS } = await import(`${dist}/src/step/statements.js`);
  const { rows, datas } = batches[0];
  const items = datas.map((d) => { const dec = decodeEnvelope({ data: d.data, msgId: `result:${d.id}:1`, maxBytes: 1 << 20 }); return envelopeToJobEvent(dec.envelope, dec.msgId); });
  const { write } = planBatch(rows).next(items);
  const params = checkingReads(write, rows);
  const names = WRITE_PARTS.flatMap((p) => Object.keys(WRITE_PARAMETERS[p]).map((c) => `${p}.${c}`)).concat(['expected', 'return', 'reads.tid', 'reads.xid']);
  let total = 0;
  params.forEach((p, i) => { const len = p === null ? 0 : String(p).length; total += len; console.log(names[i].padEnd(32), (len / 100).toFixed(1), p === null ? '' : String(p).slice(0, 70)); });
  console.log('total bytes/env', total / 100);
}
