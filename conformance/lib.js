'use strict';
// Shared helpers for the conformance scripts. Each script drives the official
// Zerobus SDK (native build, loaded straight from its .node file) and prints
// exactly one JSON line on stdout: {"ok":true,...} on success, or
// {"ok":false,"error":...,"retryable":...} with a non-zero exit on failure.

const path = require('path');
const fs = require('fs');

const SDK_FILE = path.join(__dirname, 'node_modules', '@databricks',
  'zerobus-ingest-sdk-linux-x64-gnu', 'zerobus-ingest-sdk.linux-x64-gnu.node');

let START = Date.now();

// markStart restarts the clock elapsed_ms is measured from (call it just
// before talking to the service, after the SDK is loaded).
function markStart() { START = Date.now(); }

function jsonReplacer(_k, v) { return typeof v === 'bigint' ? Number(v) : v; }

function emit(obj) {
  process.stdout.write(JSON.stringify(obj, jsonReplacer) + '\n');
}

// describeError extracts what the SDK tells about an error: the message and
// whether the SDK classifies it as retryable (ZerobusError.isRetryable).
function describeError(err) {
  const d = { error: String((err && err.message) || err) };
  if (err && err.code !== undefined) d.code = String(err.code);
  if (err && err.constructor && err.constructor.name) d.kind = err.constructor.name;
  try {
    if (err && err.isRetryable !== undefined) {
      d.retryable = typeof err.isRetryable === 'function' ? !!err.isRetryable() : !!err.isRetryable;
    }
  } catch (_) { /* not a ZerobusError */ }
  // Note: the 1.3.0 native build rejects stream creation with plain Errors
  // (code GenericFailure) that carry no isRetryable; whether the SDK retried
  // is then visible only in its behaviour (attempts, elapsed time).
  d.elapsed_ms = Date.now() - START;
  return d;
}

function fail(err, extra) {
  emit(Object.assign({ ok: false }, extra || {}, describeError(err)));
  process.exit(1);
}

function loadSdk() {
  if (!fs.existsSync(SDK_FILE)) {
    fail(new Error(`official Zerobus SDK not installed (${SDK_FILE} missing): run \`npm ci --prefix conformance\``));
  }
  return require(SDK_FILE);
}

function loadArrow() {
  try {
    return require(path.join(__dirname, 'node_modules', 'apache-arrow'));
  } catch (e) {
    fail(new Error(`apache-arrow not installed: run \`npm ci --prefix conformance\` (${e.message})`));
  }
}

// args parses --key=value flags (and bare --flag as "true"); ZB_KEY env vars
// are the fallback. Keys use dashes: --client-secret, env ZB_CLIENT_SECRET.
function args(defaults) {
  const out = Object.assign({}, defaults || {});
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('ZB_')) out[k.slice(3).toLowerCase().replace(/_/g, '-')] = v;
  }
  for (const a of process.argv.slice(2)) {
    const m = /^--([^=]+)(?:=(.*))?$/s.exec(a);
    if (!m) fail(new Error(`unexpected argument ${a}`));
    out[m[1]] = m[2] === undefined ? 'true' : m[2];
  }
  return out;
}

function need(a, ...keys) {
  for (const k of keys) {
    if (a[k] === undefined || a[k] === '') fail(new Error(`missing --${k}`));
  }
}

function int(a, k) {
  const n = Number(a[k]);
  if (!Number.isInteger(n)) fail(new Error(`--${k} must be an integer, got ${a[k]}`));
  return n;
}

function bool(a, k) { return a[k] === true || a[k] === 'true' || a[k] === '1'; }

// streamOptions maps the common flags onto the SDK's stream options.
function streamOptions(a, extra) {
  const o = Object.assign({}, extra || {});
  if (a.recovery !== undefined) o.recovery = bool(a, 'recovery');
  for (const [flag, opt] of [
    ['recovery-retries', 'recoveryRetries'],
    ['recovery-backoff-ms', 'recoveryBackoffMs'],
    ['recovery-timeout-ms', 'recoveryTimeoutMs'],
    ['flush-timeout-ms', 'flushTimeoutMs'],
    ['connection-timeout-ms', 'connectionTimeoutMs'],
    ['server-lack-of-ack-timeout-ms', 'serverLackOfAckTimeoutMs'],
  ]) {
    if (a[flag] !== undefined) o[opt] = int(a, flag);
  }
  return o;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// closeAfterFlush closes a stream whose flush() already resolved, i.e. every
// row is acknowledged durable. SDK 1.3.0 fails close() when the server
// announces a stream rotation at that moment ("Server requested graceful
// stream rotation"): a race the real service has too, and harmless once flush
// has resolved. That one error is returned (for the result line) instead of
// thrown; anything else still fails the script. The scenario's judge stays
// the emulator's read-back of every row.
async function closeAfterFlush(stream) {
  try {
    await stream.close();
    return null;
  } catch (err) {
    const msg = String(err && err.message || err);
    if (msg.includes('graceful stream rotation')) return msg;
    throw err;
  }
}

module.exports = { closeAfterFlush, markStart, loadSdk, loadArrow, args, need, int, bool, emit, fail, describeError, streamOptions, sleep };
