// Runs a view statement the zerobus output emitted for Databricks, in DuckDB,
// over a table's rows exported by a Go test, and prints the view's rows: an
// independent check of the statement's SQL and of the emulator's evaluation
// of it (test/e2e, TestKafkaDedupViewKillNine).
//
// Input: one argument, a JSON file
//   {"table": "c.s.t", "columns": [{"name": "id", "type": "BIGINT"}, ...],
//    "rows_file": "/path/rows.json", "statement": "<the statement as emitted>",
//    "view": "c.s.v", "micros": ["_zb_emit_ts"]}
// rows_file is a JSON array of row objects (timestamps as RFC 3339 text).
// Output: one JSON line {"ok": true, "statement": "<as run>", "rows": [...]},
// each row with its columns and, for each column in micros, "<name>__us", its
// value as microseconds since the epoch; or {"ok": false, "error": "..."}.
//
// The statement is run as emitted but for two stated translations, DuckDB's
// spelling of the same thing:
//   - `backtick` identifiers become "double-quoted" ones (DuckDB quotes
//     identifiers with double quotes; a doubled backtick is a literal one);
//   - ALTER VIEW v AS q becomes CREATE OR REPLACE VIEW v AS q (DuckDB's
//     ALTER VIEW only renames). Its query is the same text.
// QUALIFY, row_number() OVER (PARTITION BY … ORDER BY …) and IS NULL are
// DuckDB SQL as written.
import { readFileSync } from 'node:fs';
import { DuckDBInstance } from '@duckdb/node-api';

function quote(name) {
  return '"' + name.replaceAll('"', '""') + '"';
}

function quoteParts(full) {
  return full.split('.').map(quote).join('.');
}

// translate applies the two translations above, and nothing else.
export function translate(stmt) {
  let out = '';
  for (let i = 0; i < stmt.length; i++) {
    const c = stmt[i];
    if (c === "'") { // a string literal: copied as is
      let j = i + 1;
      while (j < stmt.length && !(stmt[j] === "'" && stmt[j + 1] !== "'")) j += stmt[j] === "'" ? 2 : 1;
      out += stmt.slice(i, j + 1);
      i = j;
      continue;
    }
    if (c !== '`') { out += c; continue; }
    let name = '';
    let j = i + 1;
    for (; j < stmt.length; j++) {
      if (stmt[j] === '`') {
        if (stmt[j + 1] === '`') { name += '`'; j++; continue; }
        break;
      }
      name += stmt[j];
    }
    out += quote(name);
    i = j;
  }
  return out.replace(/^\s*ALTER\s+VIEW\s/i, 'CREATE OR REPLACE VIEW ');
}

async function main() {
  const input = JSON.parse(readFileSync(process.argv[2], 'utf8'));
  const inst = await DuckDBInstance.create(':memory:');
  const db = await inst.connect();
  const [cat, sch] = input.table.split('.');
  await db.run(`ATTACH ':memory:' AS ${quote(cat)}`);
  await db.run(`CREATE SCHEMA ${quote(cat)}.${quote(sch)}`);
  const cols = input.columns.map(c => `${quote(c.name)}: '${c.type}'`).join(', ');
  const file = input.rows_file.replaceAll("'", "''");
  await db.run(`CREATE TABLE ${quoteParts(input.table)} AS SELECT * FROM read_json('${file}', format = 'array', columns = {${cols}})`);
  const stmt = translate(input.statement);
  await db.run(stmt);
  const extra = (input.micros || []).map(m => `, epoch_us(${quote(m)}) AS ${quote(m + '__us')}`).join('');
  const res = await db.runAndReadAll(`SELECT *${extra} FROM ${quoteParts(input.view)}`);
  process.stdout.write(JSON.stringify({ ok: true, statement: stmt, rows: res.getRowObjectsJson() }) + '\n');
}

main().catch(e => {
  process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.message || e) }) + '\n');
  process.exitCode = 1;
});
