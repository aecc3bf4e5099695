// Registers schemas in a Schema Registry and encodes records with Confluent's
// own JavaScript serializers (@confluentinc/schemaregistry), so that the Go
// codecs in internal/registry are proven against an encoder this project did
// not write. Used by internal/registry/registryjs_test.go, which states the
// values it expects back: keep the two in step.
//
//   node encode.js --registry=http://127.0.0.1:PORT --descriptors=FILE --out=FILE
//
// --descriptors holds a base64 google.protobuf.FileDescriptorSet of the
// Protobuf schema and its imports (the test compiles it from .proto text:
// @bufbuild/protobuf cannot parse .proto text at run time). The output is a
// JSON object {"avro": [...], "protobuf": [...], "json": [...]} of base64
// framed values (magic byte, schema id, message indexes, payload).
'use strict';

const fs = require('fs');
const {
  SchemaRegistryClient, SerdeType,
  AvroSerializer, ProtobufSerializer, JsonSerializer,
} = require('@confluentinc/schemaregistry');
const { create, createFileRegistry, fromBinary } = require('@bufbuild/protobuf');
const { FileDescriptorSetSchema, TimestampSchema } = require('@bufbuild/protobuf/wkt');

function flags() {
  const out = {};
  for (const a of process.argv.slice(2)) {
    const m = /^--([^=]+)=(.*)$/.exec(a);
    if (m) out[m[1]] = m[2];
  }
  return out;
}

// decimalBytes is the Avro decimal encoding of a decimal string at a scale:
// the unscaled integer, two's complement, big-endian, in as few bytes as hold
// it. (avsc, the Avro library the serializer uses, encodes bytes as given.)
function decimalBytes(text, scale) {
  const neg = text.startsWith('-');
  const [whole, frac = ''] = text.replace('-', '').split('.');
  if (frac.length > scale) throw new Error(`${text} has more than ${scale} digits`);
  let n = BigInt(whole + frac.padEnd(scale, '0'));
  if (neg) n = -n;
  let len = 1;
  while (n < -(1n << BigInt(8 * len - 1)) || n >= (1n << BigInt(8 * len - 1))) len++;
  let u = n < 0n ? (1n << BigInt(8 * len)) + n : n;
  const b = Buffer.alloc(len);
  for (let i = len - 1; i >= 0; i--) { b[i] = Number(u & 0xffn); u >>= 8n; }
  return b;
}

// fixedDecimal is a decimal as a fixed of size bytes: the same two's
// complement, sign-extended.
function fixedDecimal(text, scale, size) {
  const b = decimalBytes(text, scale);
  return Buffer.concat([Buffer.alloc(size - b.length, b[0] & 0x80 ? 0xff : 0), b]);
}

// Avro: every logical type, nested records, arrays, maps, an enum, nullable
// unions, and a named type from a reference (proof.common.Money).
const avroMoney = {
  type: 'record', name: 'Money', namespace: 'proof.common',
  fields: [
    { name: 'amount', type: { type: 'bytes', logicalType: 'decimal', precision: 12, scale: 2 } },
    { name: 'currency', type: 'string' },
  ],
};
const avroOrder = {
  type: 'record', name: 'Order', namespace: 'proof',
  fields: [
    { name: 'id', type: 'long' },
    { name: 'price', type: { type: 'bytes', logicalType: 'decimal', precision: 10, scale: 2 } },
    { name: 'rate', type: { type: 'fixed', name: 'Rate', size: 8, logicalType: 'decimal', precision: 18, scale: 6 } },
    { name: 'day', type: { type: 'int', logicalType: 'date' } },
    { name: 'at_ms', type: { type: 'int', logicalType: 'time-millis' } },
    { name: 'at_us', type: { type: 'long', logicalType: 'time-micros' } },
    { name: 'ts_ms', type: { type: 'long', logicalType: 'timestamp-millis' } },
    { name: 'ts_us', type: { type: 'long', logicalType: 'timestamp-micros' } },
    { name: 'local_ms', type: { type: 'long', logicalType: 'local-timestamp-millis' } },
    { name: 'local_us', type: { type: 'long', logicalType: 'local-timestamp-micros' } },
    { name: 'ref', type: { type: 'string', logicalType: 'uuid' } },
    { name: 'status', type: { type: 'enum', name: 'Status', symbols: ['NEW', 'PAID', 'SHIPPED'] } },
    { name: 'customer', type: {
      type: 'record', name: 'Customer', fields: [
        { name: 'name', type: 'string' },
        { name: 'address', type: { type: 'record', name: 'Address', fields: [
          { name: 'city', type: 'string' }, { name: 'zip', type: ['null', 'string'], default: null },
        ] } },
      ] } },
    { name: 'lines', type: { type: 'array', items: { type: 'record', name: 'Line', fields: [
      { name: 'sku', type: 'string' }, { name: 'qty', type: 'int' },
      { name: 'unit', type: 'proof.common.Money' },
    ] } } },
    { name: 'attrs', type: { type: 'map', values: 'long' } },
    { name: 'note', type: ['null', 'string'], default: null },
    { name: 'paid_at', type: ['null', { type: 'long', logicalType: 'timestamp-micros' }], default: null },
    { name: 'total', type: 'proof.common.Money' },
  ],
};
// The wire values: logical types as avsc writes their underlying type.
const avroRecords = [
  {
    id: 4503599627370496, price: decimalBytes('12.30', 2), rate: fixedDecimal('-0.000001', 6, 8),
    day: 19700, at_ms: 45296789, at_us: 45296789012,
    ts_ms: 1700000000123, ts_us: 1700000000123456, local_ms: 1700000000123, local_us: 1700000000123456,
    ref: '123e4567-e89b-12d3-a456-426614174000', status: 'PAID',
    customer: { name: 'Zoë', address: { city: 'Paris', zip: '75001' } },
    lines: [
      { sku: 'A-1', qty: 2, unit: { amount: decimalBytes('0.05', 2), currency: 'EUR' } },
      { sku: 'B-2', qty: -1, unit: { amount: decimalBytes('-1000000000.99', 2), currency: 'USD' } },
    ],
    attrs: { weight: 1500, volume: -3 },
    note: 'leave at door', paid_at: 1700000000654321,
    total: { amount: decimalBytes('9999999999.99', 2), currency: 'EUR' },
  },
  {
    id: -1, price: decimalBytes('-0.01', 2), rate: fixedDecimal('123456789012.345678', 6, 8),
    day: -1, at_ms: 0, at_us: 86399999999,
    ts_ms: -1, ts_us: -1, local_ms: 0, local_us: 1,
    ref: '00000000-0000-0000-0000-000000000000', status: 'NEW',
    customer: { name: '', address: { city: 'Oslo', zip: null } },
    lines: [], attrs: {}, note: null, paid_at: null,
    total: { amount: decimalBytes('0', 2), currency: 'NOK' },
  },
];

// JSON Schema, with a $ref to a referenced schema.
const jsonAddress = {
  $schema: 'http://json-schema.org/draft-07/schema#', title: 'Address', type: 'object',
  properties: { city: { type: 'string' }, zip: { type: 'string' } }, required: ['city'],
};
const jsonOrder = {
  $schema: 'http://json-schema.org/draft-07/schema#', title: 'Order', type: 'object',
  properties: {
    id: { type: 'integer' },
    amount: { type: 'number' },
    placed: { type: 'string', format: 'date-time' },
    day: { type: 'string', format: 'date' },
    tags: { type: 'array', items: { type: 'string' } },
    note: { type: ['null', 'string'] },
    ship: { $ref: 'address.json' },
  },
  required: ['id', 'amount', 'placed'],
};
const jsonRecords = [
  { id: 42, amount: 12.5, placed: '2023-11-14T22:13:20.123456Z', day: '2023-12-09', tags: ['a', 'b'], note: null, ship: { city: 'Paris', zip: '75001' } },
  { id: -7, amount: 0.1, placed: '1969-12-31T23:59:59.999999Z' },
];

async function main() {
  const f = flags();
  const client = new SchemaRegistryClient({ baseURLs: [f.registry] });
  const out = { avro: [], protobuf: [], json: [] };

  // Avro: the reference first, then the schema that names it.
  await client.register('proof-common-money', { schemaType: 'AVRO', schema: JSON.stringify(avroMoney) });
  await client.register('proof-avro-value', {
    schemaType: 'AVRO', schema: JSON.stringify(avroOrder),
    references: [{ name: 'proof.common.Money', subject: 'proof-common-money', version: 1 }],
  });
  const avro = new AvroSerializer(client, SerdeType.VALUE, { useLatestVersion: true });
  for (const r of avroRecords) {
    out.avro.push((await avro.serialize('proof-avro', r)).toString('base64'));
  }

  // Protobuf: the serializer registers the schema and its import itself
  // (autoRegisterSchemas), and writes the message indexes.
  const set = fromBinary(FileDescriptorSetSchema, Buffer.from(fs.readFileSync(f.descriptors, 'utf8'), 'base64'));
  const registry = createFileRegistry(set);
  const proto = new ProtobufSerializer(client, SerdeType.VALUE, { autoRegisterSchemas: true, registry });
  const Event = registry.getMessage('proof.v1.Event');
  const Change = registry.getMessage('proof.v1.Event.Audit.Change');
  const Header = registry.getMessage('proof.v1.Header');
  const Money = registry.getMessage('proof.common.Money');
  const Item = registry.getMessage('proof.v1.Event.Item');
  const msgs = [
    create(Event, {
      id: 'evt-1', big: -9007199254740993n,
      amount: create(Money, { units: 1230n, currency: 'EUR' }),
      at: create(TimestampSchema, { seconds: 1700000000n, nanos: 123456789 }),
      counts: { a: 1, b: -2 }, kind: 1,
      items: [create(Item, { sku: 'A', qty: 4294967295, blob: Buffer.from([0, 1, 254, 255]) })],
    }),
    create(Change, { field: 'price', delta: -0.5 }),
    create(Header, { source: 'js' }),
  ];
  for (const m of msgs) {
    out.protobuf.push((await proto.serialize('proof-protobuf', m)).toString('base64'));
  }

  // JSON Schema with a reference. The serializer validates with ajv, which
  // knows no formats without the ajv-formats plugin: formats are left to the
  // Go side's validator.
  await client.register('proof-address', { schemaType: 'JSON', schema: JSON.stringify(jsonAddress) });
  await client.register('proof-json-value', {
    schemaType: 'JSON', schema: JSON.stringify(jsonOrder),
    references: [{ name: 'address.json', subject: 'proof-address', version: 1 }],
  });
  const json = new JsonSerializer(client, SerdeType.VALUE, { useLatestVersion: true, validate: true, validateFormats: false });
  for (const r of jsonRecords) {
    out.json.push((await json.serialize('proof-json', r)).toString('base64'));
  }

  fs.writeFileSync(f.out, JSON.stringify(out));
  console.log(JSON.stringify({ ok: true, avro: out.avro.length, protobuf: out.protobuf.length, json: out.json.length }));
}

// The schemas and records, for e2e.js (the binaries' end-to-end test).
module.exports = {
  flags, decimalBytes, fixedDecimal,
  avroMoney, avroOrder, avroRecords, jsonAddress, jsonOrder, jsonRecords,
};

if (require.main === module) {
  main().catch((e) => {
    console.log(JSON.stringify({ ok: false, error: String(e && e.stack || e) }));
    process.exit(1);
  });
}
