#!/usr/bin/env bash
# demo.sh: the README's "run the main job" command (make demo).
# Starts the local Zerobus + workspace emulator (bin/zerobus-emulator), runs the quickstart pipeline
# (generate -> zerobus) against it, and prints what landed in the table.
#
# demo.sh kafka (make demo-kafka): the emulator serves a Kafka broker too (--kafka, a topic "orders"
# of three partitions); `zerobus-emulator kafka-produce` writes DEMO_KAFKA_COUNT records (default
# 5000) to it, config/examples/kafka.yaml (redpanda -> zerobus, a consumer group) runs until every
# record has landed and is then stopped (SIGTERM: it commits what is durable and leaves the group),
# and the demo prints the table, its coverage and the group's committed offsets beside the end offsets.
#
# demo.sh avro (make demo-avro): the same with Avro in the Confluent Schema Registry wire format: the
# emulator serves a broker and a Schema Registry (--kafka, --schema-registry, a topic "readings"),
# `zerobus-emulator avro-produce` registers an Avro schema (timestamp, date, decimal, enum, array,
# nullable fields) and produces DEMO_AVRO_COUNT records (default 1000) encoded with it,
# config/examples/avro.yaml (redpanda -> schema_registry_decode -> zerobus, the table created from the
# registry's schema) runs until all have landed, and the demo prints the table with its columns.
#
# Ports: every listener of the emulator (workspace HTTP, Zerobus gRPC, S3 storage) is on a free
# loopback port unless DEMO_HTTP_ADDR / DEMO_GRPC_ADDR / DEMO_S3_ADDR name one; the pipeline's own
# HTTP server (metrics) uses DEMO_METRICS_ADDR, by default 127.0.0.1:4195 when free, else a free port.
# A named port that is taken stops the demo with the emulator's own error, which names the port.
set -euo pipefail
MODE=quickstart
case "${1:-}" in
  kafka|avro) MODE=$1; shift ;;
esac
BIN=${1:-bin/benthos-zerobus}
EMU=${2:-bin/zerobus-emulator}
HTTP_ADDR=${DEMO_HTTP_ADDR:-127.0.0.1:0}
GRPC_ADDR=${DEMO_GRPC_ADDR:-127.0.0.1:0}
S3_ADDR=${DEMO_S3_ADDR:-127.0.0.1:0}
TABLE=main.default.quickstart
EMU_ARGS=(--table "$TABLE:id BIGINT NOT NULL, device STRING, temperature DOUBLE, reading_ts TIMESTAMP, tags ARRAY<STRING>, _zb_emit_ts TIMESTAMP")
# The Kafka modes: the topic, the config that reads it, its consumer group, and how many records.
if [ "$MODE" = kafka ]; then
  TABLE=main.default.orders
  TOPIC=orders CONFIG=config/examples/kafka.yaml GROUP=zerobus-orders
  KAFKA_COUNT=${DEMO_KAFKA_COUNT:-5000}
  EMU_ARGS=(--kafka "${DEMO_KAFKA_ADDR:-127.0.0.1:0}" --kafka-topic orders:3)
elif [ "$MODE" = avro ]; then
  TABLE=main.default.avro_readings
  TOPIC=readings CONFIG=config/examples/avro.yaml GROUP=zerobus-readings
  KAFKA_COUNT=${DEMO_AVRO_COUNT:-1000}
  EMU_ARGS=(--kafka "${DEMO_KAFKA_ADDR:-127.0.0.1:0}" --kafka-topic readings:3
            --schema-registry "${DEMO_SCHEMA_REGISTRY_ADDR:-127.0.0.1:0}")
fi
DATA=$(mktemp -d)
EMU_PID=
RUN_PID=
cleanup() {
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill "$RUN_PID" 2>/dev/null || true
    wait "$RUN_PID" 2>/dev/null || true
  fi
  if [ -n "$EMU_PID" ] && kill -0 "$EMU_PID" 2>/dev/null; then
    kill "$EMU_PID" 2>/dev/null || true
    wait "$EMU_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

# port_in_use HOST:PORT: something accepts connections there.
port_in_use() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

"$EMU" --http "$HTTP_ADDR" --grpc "$GRPC_ADDR" --s3 "$S3_ADDR" --data "$DATA/tables" \
  --addr-file "$DATA/addr.env" "${EMU_ARGS[@]}" \
  >"$DATA/emulator.log" 2>&1 &
EMU_PID=$!

# The emulator writes --addr-file once every listener is bound; a bind failure ends the process
# with an error naming the port. Wait for one or the other (30 s at most).
for _ in $(seq 1 300); do
  [ -f "$DATA/addr.env" ] && break
  if ! kill -0 "$EMU_PID" 2>/dev/null; then
    wait "$EMU_PID" 2>/dev/null && rc=0 || rc=$?
    EMU_PID=
    echo "== the emulator failed to start (exit $rc):" >&2
    cat "$DATA/emulator.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ ! -f "$DATA/addr.env" ]; then
  echo "== the emulator did not report its addresses within 30 s; its log:" >&2
  cat "$DATA/emulator.log" >&2
  exit 1
fi
# shellcheck disable=SC1091
. "$DATA/addr.env"   # DATABRICKS_HOST, ZEROBUS_ENDPOINT, ZEROBUS_EMULATOR_S3 (and KAFKA_BROKERS, SCHEMA_REGISTRY_URL)

if ! curl -fsS "$DATABRICKS_HOST/emulator/v1/health" >/dev/null || ! kill -0 "$EMU_PID" 2>/dev/null; then
  echo "== the emulator is not healthy at $DATABRICKS_HOST/emulator/v1/health; its log:" >&2
  cat "$DATA/emulator.log" >&2
  exit 1
fi

METRICS_ADDR=${DEMO_METRICS_ADDR:-127.0.0.1:4195}
if [ -z "${DEMO_METRICS_ADDR:-}" ] && port_in_use "$METRICS_ADDR"; then
  echo "== 127.0.0.1:4195 is taken: the pipeline's metrics server uses a free port instead (set DEMO_METRICS_ADDR to choose)"
  METRICS_ADDR=127.0.0.1:0
fi

echo "== emulator up (pid $EMU_PID): workspace $DATABRICKS_HOST, Zerobus $ZEROBUS_ENDPOINT, S3 $ZEROBUS_EMULATOR_S3${KAFKA_BROKERS:+, Kafka $KAFKA_BROKERS}${SCHEMA_REGISTRY_URL:+, Schema Registry $SCHEMA_REGISTRY_URL}"
if [ "$MODE" = quickstart ]; then
  ZEROBUS_ENDPOINT="$ZEROBUS_ENDPOINT" DATABRICKS_HOST="$DATABRICKS_HOST" HTTP_ADDRESS="$METRICS_ADDR" \
    "$BIN" run config/examples/quickstart.yaml
else
  if [ "$MODE" = avro ]; then
    "$EMU" avro-produce --brokers "$KAFKA_BROKERS" --registry "$SCHEMA_REGISTRY_URL" --topic "$TOPIC" --count "$KAFKA_COUNT"
    echo "== running $CONFIG (redpanda -> schema_registry_decode -> zerobus) until all $KAFKA_COUNT records have landed"
  else
    "$EMU" kafka-produce --brokers "$KAFKA_BROKERS" --topic "$TOPIC" --count "$KAFKA_COUNT"
    echo "== running $CONFIG (redpanda -> zerobus) until all $KAFKA_COUNT records have landed"
  fi
  ZEROBUS_ENDPOINT="$ZEROBUS_ENDPOINT" DATABRICKS_HOST="$DATABRICKS_HOST" HTTP_ADDRESS="$METRICS_ADDR" \
    KAFKA_BROKERS="$KAFKA_BROKERS" SCHEMA_REGISTRY_URL="${SCHEMA_REGISTRY_URL:-}" \
    "$BIN" run "$CONFIG" >"$DATA/pipeline.log" 2>&1 &
  RUN_PID=$!
  landed=0
  for _ in $(seq 1 1200); do
    # The table is created (catalog.provision) from the first records: 404 until then.
    landed=$(curl -fsS "$DATABRICKS_HOST/emulator/v1/tables/$TABLE" 2>/dev/null | sed -n 's/.*"row_count":\([0-9]*\).*/\1/p' || true)
    [ "${landed:-0}" -ge "$KAFKA_COUNT" ] && break
    if ! kill -0 "$RUN_PID" 2>/dev/null; then
      echo "== the pipeline ended early; its log:" >&2
      cat "$DATA/pipeline.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [ "${landed:-0}" -lt "$KAFKA_COUNT" ]; then
    echo "== only ${landed:-0} of $KAFKA_COUNT records landed within 120 s; the pipeline's log:" >&2
    cat "$DATA/pipeline.log" >&2
    exit 1
  fi
  # SIGTERM: the input commits what is durable, then leaves the group.
  kill -TERM "$RUN_PID"
  wait "$RUN_PID" || { echo "== the pipeline did not stop cleanly; its log:" >&2; cat "$DATA/pipeline.log" >&2; exit 1; }
  RUN_PID=
  echo "== the pipeline's start-up and last lines:"
  grep -iE 'redpanda|kafka|consumer|group|schema_registry' "$DATA/pipeline.log" | head -5 || true
  tail -n 3 "$DATA/pipeline.log"
fi

echo "== table $TABLE after the run:"
curl -fsS "$DATABRICKS_HOST/emulator/v1/tables/$TABLE"; echo
if [ "$MODE" = avro ]; then
  echo "== its columns, typed from the registry's Avro schema (decimal -> DECIMAL(10,2), timestamp-micros -> TIMESTAMP, date -> DATE, enum -> STRING):"
  curl -fsS "$DATABRICKS_HOST/emulator/v1/tables/$TABLE" | tr '{' '\n' |
    sed -n 's/.*"name":"\([^"]*\)","type_text":"\([^"]*\)","type_name":"[^"]*","nullable":\([a-z]*\).*/  \1 \2 nullable=\3/p' |
    sed 's/\\u003c/</g; s/\\u003e/>/g'
fi
echo "== first rows:"
curl -fsS "$DATABRICKS_HOST/emulator/v1/tables/$TABLE/rows?limit=3"; echo
if [ "$MODE" != quickstart ]; then
  echo "== coverage (durable offset ranges per partition, ${TABLE}_zb_coverage; the first 6 rows):"
  curl -fsS "$DATABRICKS_HOST/emulator/v1/tables/${TABLE}_zb_coverage/rows?limit=6"; echo
  echo "== the group's committed offsets (== the end offsets: every record durable, then committed):"
  "$EMU" kafka-offsets --brokers "$KAFKA_BROKERS" --topic "$TOPIC" --group "$GROUP"
fi
