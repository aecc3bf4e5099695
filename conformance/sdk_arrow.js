'use strict';
// Ingests Arrow record batches through the official SDK's Arrow stream
// (Flight DoPut), then flushes and closes.
//
// Batches come either from --ipc-file (a sequence of [u32 LE length][Arrow IPC
// stream bytes], one per batch, as written by the Go tests; the SDK stream's
// schema is taken from the first one) or are generated (--rows, --batch-rows,
// --start) with the scenario schema:
//   id Int64 NOT NULL, name LargeUtf8 (null when id%7==0), score Float64 (id/2),
//   flag Bool (id%2==0)
// Timing (ingest_seconds) runs from the first ingestBatch to the end of flush.
const fs = require('fs');
const L = require('./lib');

function readIpcFile(file) {
  const buf = fs.readFileSync(file);
  const out = [];
  for (let off = 0; off < buf.length;) {
    const n = buf.readUInt32LE(off);
    off += 4;
    out.push(buf.subarray(off, off + n));
    off += n;
  }
  return out;
}

function sdkFields(arrow, sdkMod, schema) {
  const T = arrow.Type, D = sdkMod.ArrowDataType;
  return schema.fields.map((f) => {
    const t = f.type;
    let dt;
    switch (t.typeId) {
      case T.Bool: dt = D.Boolean; break;
      case T.Int: dt = D[(t.isSigned ? 'Int' : 'UInt') + t.bitWidth]; break;
      case T.Float: dt = t.precision === arrow.Precision.SINGLE ? D.Float32 : D.Float64; break;
      case T.Utf8: dt = D.Utf8; break;
      case T.LargeUtf8: dt = D.LargeUtf8; break;
      case T.Binary: dt = D.Binary; break;
      case T.LargeBinary: dt = D.LargeBinary; break;
      case T.Date: dt = t.unit === arrow.DateUnit.DAY ? D.Date32 : D.Date64; break;
      case T.Timestamp:
        dt = t.unit === arrow.TimeUnit.MICROSECOND ? D.TimestampMicros
          : t.unit === arrow.TimeUnit.NANOSECOND ? D.TimestampNanos : undefined;
        break;
      default: dt = undefined;
    }
    if (dt === undefined) L.fail(new Error(`column ${f.name}: Arrow type ${t} has no SDK ArrowDataType`));
    return { name: f.name, dataType: dt, nullable: f.nullable };
  });
}

function generate(arrow, start, rows, batchRows) {
  const fields = [
    new arrow.Field('id', new arrow.Int64(), false),
    new arrow.Field('name', new arrow.LargeUtf8(), true),
    new arrow.Field('score', new arrow.Float64(), true),
    new arrow.Field('flag', new arrow.Bool(), true),
  ];
  const schema = new arrow.Schema(fields);
  const out = [];
  for (let b = start; b < start + rows; b += batchRows) {
    const n = Math.min(batchRows, start + rows - b);
    const ids = [], names = [], scores = [], flags = [];
    for (let id = b; id < b + n; id++) {
      ids.push(BigInt(id));
      names.push(id % 7 === 0 ? null : `name-${id}`);
      scores.push(id / 2);
      flags.push(id % 2 === 0);
    }
    const cols = [
      arrow.vectorFromArray(ids, new arrow.Int64()),
      arrow.vectorFromArray(names, new arrow.LargeUtf8()),
      arrow.vectorFromArray(scores, new arrow.Float64()),
      arrow.vectorFromArray(flags, new arrow.Bool()),
    ];
    const data = arrow.makeData({ type: new arrow.Struct(fields), length: n, nullCount: 0, children: cols.map((c) => c.data[0]) });
    out.push(arrow.tableToIPC(new arrow.Table([new arrow.RecordBatch(schema, data)]), 'stream'));
  }
  return out;
}

async function main() {
  const a = L.args({ rows: '20000', start: '0', 'batch-rows': '2500', 'pace-ms': '0', compression: '' });
  L.need(a, 'endpoint', 'workspace-url', 'client-id', 'client-secret', 'table');
  const sdkMod = L.loadSdk();
  const arrow = L.loadArrow();

  const batches = a['ipc-file'] ? readIpcFile(a['ipc-file'])
    : generate(arrow, L.int(a, 'start'), L.int(a, 'rows'), L.int(a, 'batch-rows'));
  if (batches.length === 0) L.fail(new Error('no batches'));
  const first = arrow.tableFromIPC(batches[0]);
  const fields = sdkFields(arrow, sdkMod, first.schema);
  let rows = 0, bytes = 0;
  for (const b of batches) bytes += b.length;
  // Row counts come from the IPC itself so the report is exact either way.
  for (const b of batches) rows += a['ipc-file'] ? arrow.tableFromIPC(b).numRows : 0;
  if (!a['ipc-file']) rows = L.int(a, 'rows');

  const opts = {};
  if (a['max-inflight-batches']) opts.maxInflightBatches = L.int(a, 'max-inflight-batches');
  if (a.compression === 'lz4') opts.ipcCompression = sdkMod.IpcCompressionType.Lz4Frame;
  if (a.compression === 'zstd') opts.ipcCompression = sdkMod.IpcCompressionType.Zstd;

  L.markStart();
  const sdk = new sdkMod.ZerobusSdk(a.endpoint, a['workspace-url']);
  const tOpen = Date.now();
  const stream = await sdk.createArrowStream({ tableName: a.table, schemaFields: fields },
    a['client-id'], a['client-secret'], L.streamOptions(a, opts));
  const openSeconds = (Date.now() - tOpen) / 1000;

  const paceMs = L.int(a, 'pace-ms');
  const t0 = process.hrtime.bigint();
  let lastOffset = -1;
  for (const b of batches) {
    lastOffset = await stream.ingestBatch(b);
    if (paceMs > 0) await L.sleep(paceMs);
  }
  await stream.flush();
  const ingestSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const unacked = await stream.getUnackedBatches().catch(() => null);
  const closeError = await L.closeAfterFlush(stream);
  L.emit({
    ok: true, close_error: closeError, rows, batches: batches.length, ipc_bytes: bytes, last_offset: lastOffset,
    unacked: unacked ? unacked.length : 0, open_seconds: openSeconds, ingest_seconds: ingestSeconds,
  });
}

main().catch((e) => L.fail(e));
