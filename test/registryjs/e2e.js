// The end-to-end proof through the built binaries (test/e2e/registry_test.go):
// Confluent's own JavaScript serializers (@confluentinc/schemaregistry)
// register schemas in the emulator's registry and encode the records that
// the test produces to Kafka topics, for the product binary (redpanda →
// schema_registry_decode → zerobus) to land. One run does every format, so
// that node starts once. The schemas and the v1 records are encode.js's.
//
//   node e2e.js --registry=http://127.0.0.1:PORT --descriptors=FILE --out=FILE
//
// The output is a JSON object of base64 framed values per topic, each in the
// order to produce it:
//   avro_v1, avro_v2 (topic sr_avro: v2 adds the fields channel and discount)
//   protobuf (sr_proto: proof.v1.Event, message index [1])
//   json (sr_json), debezium (dbz.inventory.customers: Debezium envelopes)
// and the schema id of each subject. test/e2e/registry_test.go states the
// values it expects back: keep the two in step.
'use strict';

const fs = require('fs');
const {
  SchemaRegistryClient, SerdeType,
  AvroSerializer, ProtobufSerializer, JsonSerializer,
} = require('@confluentinc/schemaregistry');
const { create, createFileRegistry, fromBinary } = require('@bufbuild/protobuf');
const { FileDescriptorSetSchema, TimestampSchema } = require('@bufbuild/protobuf/wkt');
const {
  flags, decimalBytes, avroMoney, avroOrder, avroRecords, jsonAddress, jsonOrder, jsonRecords,
} = require('./encode.js');

const topics = { avro: 'sr_avro', protobuf: 'sr_proto', json: 'sr_json', debezium: 'dbz.inventory.customers' };

// v2 of the Avro schema adds two fields with defaults (a backward-compatible
// change): a string and a nullable decimal.
const avroOrderV2 = {
  ...avroOrder,
  fields: [
    ...avroOrder.fields,
    { name: 'channel', type: 'string', default: 'web' },
    { name: 'discount', type: ['null', { type: 'bytes', logicalType: 'decimal', precision: 5, scale: 2 }], default: null },
  ],
};
const avroRecordsV2 = [
  { ...avroRecords[0], id: 7, channel: 'mobile', discount: decimalBytes('-1.25', 2) },
  { ...avroRecords[1], id: 8, channel: 'web', discount: null },
];

// A Debezium change event as Confluent's AvroConverter writes a Postgres
// connector's (time.precision.mode=connect, decimal.handling.mode=precise):
// the row image before and after, the source position, the operation.
// Connect's own logical types carry an Avro logicalType beside their
// connect.name; Debezium's own (io.debezium.*) would not.
const dbzValue = {
  type: 'record', name: 'Value', namespace: 'dbz.inventory.customers',
  fields: [
    { name: 'id', type: 'int' },
    { name: 'first_name', type: 'string' },
    { name: 'email', type: 'string' },
    { name: 'balance', type: ['null', {
      type: 'bytes', logicalType: 'decimal', precision: 10, scale: 2,
      'connect.version': 1, 'connect.parameters': { scale: '2', 'connect.decimal.precision': '10' },
      'connect.name': 'org.apache.kafka.connect.data.Decimal',
    }], default: null },
    { name: 'born', type: ['null', {
      type: 'int', logicalType: 'date', 'connect.version': 1, 'connect.name': 'org.apache.kafka.connect.data.Date',
    }], default: null },
    { name: 'updated_at', type: {
      type: 'long', logicalType: 'timestamp-millis', 'connect.version': 1, 'connect.name': 'org.apache.kafka.connect.data.Timestamp',
    } },
  ],
  'connect.name': 'dbz.inventory.customers.Value',
};
const dbzSource = {
  type: 'record', name: 'Source', namespace: 'io.debezium.connector.postgresql',
  fields: [
    { name: 'version', type: 'string' },
    { name: 'connector', type: 'string' },
    { name: 'name', type: 'string' },
    { name: 'ts_ms', type: 'long' },
    { name: 'snapshot', type: ['null', 'string'], default: null },
    { name: 'db', type: 'string' },
    { name: 'schema', type: 'string' },
    { name: 'table', type: 'string' },
    { name: 'txId', type: ['null', 'long'], default: null },
    { name: 'lsn', type: ['null', 'long'], default: null },
  ],
  'connect.name': 'io.debezium.connector.postgresql.Source',
};
const dbzEnvelope = {
  type: 'record', name: 'Envelope', namespace: 'dbz.inventory.customers',
  fields: [
    { name: 'before', type: ['null', dbzValue], default: null },
    { name: 'after', type: ['null', 'dbz.inventory.customers.Value'], default: null },
    { name: 'source', type: dbzSource },
    { name: 'op', type: 'string' },
    { name: 'ts_ms', type: ['null', 'long'], default: null },
  ],
  'connect.name': 'dbz.inventory.customers.Envelope',
};
function dbzSourceAt(lsn, tsMs, snapshot) {
  return {
    version: '2.7.3.Final', connector: 'postgresql', name: 'dbz', ts_ms: tsMs, snapshot,
    db: 'inventory', schema: 'inventory', table: 'customers', txId: lsn / 8, lsn,
  };
}
const alice = { id: 1001, first_name: 'Alice', email: 'alice@example.com', balance: decimalBytes('1234.50', 2), born: 3653, updated_at: 1700000000123 };
const bob = { id: 1002, first_name: 'Bob', email: 'bob@example.com', balance: null, born: null, updated_at: 1700000001000 };
const dbzRecords = [
  { before: null, after: alice, source: dbzSourceAt(24023128, 1700000000200, 'true'), op: 'r', ts_ms: 1700000000210 },
  { before: null, after: bob, source: dbzSourceAt(24023200, 1700000001100, 'false'), op: 'c', ts_ms: 1700000001110 },
  { before: alice, after: { ...alice, email: 'alice@new.example', balance: decimalBytes('-0.01', 2), updated_at: 1700000002000 },
    source: dbzSourceAt(24023304, 1700000002100, 'false'), op: 'u', ts_ms: 1700000002110 },
  { before: bob, after: null, source: dbzSourceAt(24023408, 1700000003100, 'false'), op: 'd', ts_ms: 1700000003110 },
];

async function main() {
  const f = flags();
  const out = { avro_v1: [], avro_v2: [], protobuf: [], json: [], debezium: [], ids: {} };
  const b64 = (buf) => buf.toString('base64');
  const client = () => new SchemaRegistryClient({ baseURLs: [f.registry] });

  // Avro v1 (with its reference), then v2 registered and encoded by a fresh
  // client, so that no cached "latest" version is used.
  const c1 = client();
  await c1.register('proof-common-money', { schemaType: 'AVRO', schema: JSON.stringify(avroMoney) });
  const refs = [{ name: 'proof.common.Money', subject: 'proof-common-money', version: 1 }];
  out.ids.avro_v1 = await c1.register(`${topics.avro}-value`, { schemaType: 'AVRO', schema: JSON.stringify(avroOrder), references: refs });
  const avro1 = new AvroSerializer(c1, SerdeType.VALUE, { useLatestVersion: true });
  for (const r of avroRecords) out.avro_v1.push(b64(await avro1.serialize(topics.avro, r)));
  const c2 = client();
  out.ids.avro_v2 = await c2.register(`${topics.avro}-value`, { schemaType: 'AVRO', schema: JSON.stringify(avroOrderV2), references: refs });
  const avro2 = new AvroSerializer(c2, SerdeType.VALUE, { useLatestVersion: true });
  for (const r of avroRecordsV2) out.avro_v2.push(b64(await avro2.serialize(topics.avro, r)));

  // Protobuf: the serializer registers the schema and its imports itself.
  const set = fromBinary(FileDescriptorSetSchema, Buffer.from(fs.readFileSync(f.descriptors, 'utf8'), 'base64'));
  const registry = createFileRegistry(set);
  const proto = new ProtobufSerializer(client(), SerdeType.VALUE, { autoRegisterSchemas: true, registry });
  const Event = registry.getMessage('proof.v1.Event');
  const Money = registry.getMessage('proof.common.Money');
  const Item = registry.getMessage('proof.v1.Event.Item');
  const events = [
    create(Event, {
      id: 'evt-1', big: -9007199254740993n,
      amount: create(Money, { units: 1230n, currency: 'EUR' }),
      at: create(TimestampSchema, { seconds: 1700000000n, nanos: 123456789 }),
      counts: { a: 1, b: -2 }, kind: 1,
      items: [
        create(Item, { sku: 'A', qty: 4294967295, blob: Buffer.from([0, 1, 254, 255]) }),
        create(Item, { sku: 'B', qty: 0 }),
      ],
    }),
    create(Event, { id: 'evt-2' }),
  ];
  for (const m of events) out.protobuf.push(b64(await proto.serialize(topics.protobuf, m)));

  // JSON Schema with a reference.
  const cj = client();
  await cj.register('proof-address', { schemaType: 'JSON', schema: JSON.stringify(jsonAddress) });
  out.ids.json = await cj.register(`${topics.json}-value`, {
    schemaType: 'JSON', schema: JSON.stringify(jsonOrder),
    references: [{ name: 'address.json', subject: 'proof-address', version: 1 }],
  });
  const json = new JsonSerializer(cj, SerdeType.VALUE, { useLatestVersion: true, validate: true, validateFormats: false });
  for (const r of jsonRecords) out.json.push(b64(await json.serialize(topics.json, r)));

  // Debezium envelopes, as the connector's AvroConverter registers them.
  const cd = client();
  out.ids.debezium = await cd.register(`${topics.debezium}-value`, { schemaType: 'AVRO', schema: JSON.stringify(dbzEnvelope) });
  const dbz = new AvroSerializer(cd, SerdeType.VALUE, { useLatestVersion: true });
  for (const r of dbzRecords) out.debezium.push(b64(await dbz.serialize(topics.debezium, r)));

  fs.writeFileSync(f.out, JSON.stringify(out));
  console.log(JSON.stringify({ ok: true, ids: out.ids }));
}

main().catch((e) => {
  console.log(JSON.stringify({ ok: false, error: String(e && e.stack || e) }));
  process.exit(1);
});
