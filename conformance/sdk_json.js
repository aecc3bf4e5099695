'use strict';
// Ingests --rows JSON records through the official SDK's record stream
// (EphemeralStream, RecordType.Json), then flushes and closes.
// Records: {"id":i,"name":"name-i" (null when i%7==0),"score":i/2,"flag":i%2==0}
// for i in [start, start+rows).
// --empty-batch-first first calls ingestRecordsOffset([]) and reports what it
// returned as empty_batch_result (the SDK sends nothing for it).
const L = require('./lib');

async function main() {
  const a = L.args({ rows: '5000', start: '0', 'batch-size': '1', 'pace-ms': '0', 'pace-every': '100' });
  L.need(a, 'endpoint', 'workspace-url', 'client-id', 'client-secret', 'table');
  const sdkMod = L.loadSdk();
  const rows = L.int(a, 'rows'), start = L.int(a, 'start'), batch = L.int(a, 'batch-size');
  const paceMs = L.int(a, 'pace-ms'), paceEvery = L.int(a, 'pace-every');

  L.markStart();
  const sdk = new sdkMod.ZerobusSdk(a.endpoint, a['workspace-url']);
  const t0 = Date.now();
  const stream = await sdk.createStream({ tableName: a.table }, a['client-id'], a['client-secret'],
    L.streamOptions(a, { recordType: sdkMod.RecordType.Json }));
  let lastOffset = -1, requests = 0, emptyResult;
  if (L.bool(a, 'empty-batch-first')) {
    const r = await stream.ingestRecordsOffset([]);
    emptyResult = r === undefined ? 'undefined' : r;
  }
  for (let i = start; i < start + rows; i += batch) {
    const recs = [];
    for (let j = i; j < Math.min(i + batch, start + rows); j++) {
      recs.push(JSON.stringify({ id: j, name: j % 7 === 0 ? null : `name-${j}`, score: j / 2, flag: j % 2 === 0 }));
    }
    lastOffset = batch === 1 ? await stream.ingestRecordOffset(recs[0]) : await stream.ingestRecordsOffset(recs);
    requests++;
    if (paceMs > 0 && requests % paceEvery === 0) await L.sleep(paceMs);
  }
  await stream.flush();
  const unacked = await stream.getUnackedRecords().catch(() => null);
  const closeError = await L.closeAfterFlush(stream);
  L.emit({ ok: true, close_error: closeError, rows, requests, last_offset: lastOffset, unacked: unacked ? unacked.length : 0,
    empty_batch_result: emptyResult, seconds: (Date.now() - t0) / 1000 });
}

main().catch((e) => L.fail(e));
