#!/usr/bin/env bash
# demo.sh: the README's "run the main job" command.
# Starts the local Zerobus + workspace emulator (bin/zerobus-emulator), runs the quickstart pipeline
# (generate -> zerobus) against it, and prints what landed in the table.
set -euo pipefail
BIN=${1:-bin/benthos-zerobus}
EMU=${2:-bin/zerobus-emulator}
HTTP_ADDR=${DEMO_HTTP_ADDR:-127.0.0.1:18080}
GRPC_ADDR=${DEMO_GRPC_ADDR:-127.0.0.1:15051}
TABLE=main.default.quickstart
DATA=$(mktemp -d)
trap 'kill "$EMU_PID" 2>/dev/null || true; wait "$EMU_PID" 2>/dev/null || true; rm -rf "$DATA"' EXIT

"$EMU" --http "$HTTP_ADDR" --grpc "$GRPC_ADDR" --data "$DATA" \
  --table "$TABLE:id BIGINT NOT NULL, device STRING, temperature DOUBLE, reading_ts TIMESTAMP, tags ARRAY<STRING>, _zb_emit_ts TIMESTAMP" \
  >"$DATA/emulator.log" 2>&1 &
EMU_PID=$!

for _ in $(seq 1 100); do
  curl -fsS "http://$HTTP_ADDR/.well-known/databricks-config" >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== emulator up: http://$HTTP_ADDR (workspace), http://$GRPC_ADDR (zerobus)"
ZEROBUS_ENDPOINT="http://$GRPC_ADDR" DATABRICKS_HOST="http://$HTTP_ADDR" \
  "$BIN" run config/examples/quickstart.yaml

echo "== table $TABLE after the run:"
curl -fsS "http://$HTTP_ADDR/emulator/v1/tables/$TABLE"; echo
echo "== first rows:"
curl -fsS "http://$HTTP_ADDR/emulator/v1/tables/$TABLE/rows?limit=3"; echo
