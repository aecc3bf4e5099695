package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"testing"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

const (
	confClientID = "conformance-client"
	confSecret   = "conformance-secret"
	confTable    = "main.default.t1"
	// The official SDK derives the workspace id from the Zerobus endpoint's
	// first dot-separated label: for http://127.0.0.1:PORT that is "127". The
	// emulator checks the token resource against its workspace id, so the
	// emulators here use the id the SDK derives.
	confWorkspaceID = "127"
)

// startEmulator starts a fresh in-process emulator with the scenario table
// (and any extra tables) and the given faults; it is closed with the test.
func startEmulator(t testing.TB, faults emulator.Faults, extraTables ...string) *emulator.Server {
	t.Helper()
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr:     "127.0.0.1:0",
		GRPCAddr:     "127.0.0.1:0",
		DataDir:      t.TempDir(),
		Tables:       append([]string{confTable + ":" + scenarioCols}, extraTables...),
		ClientID:     confClientID,
		ClientSecret: confSecret,
		WorkspaceID:  confWorkspaceID,
		Faults:       faults,
	})
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// sdkFlags are the flags every node script takes to reach the emulator.
func sdkFlags(srv *emulator.Server, secret string, extra map[string]string) map[string]string {
	f := map[string]string{
		"endpoint":      srv.GRPCURL(),
		"workspace-url": srv.HTTPURL(),
		"client-id":     confClientID,
		"client-secret": secret,
		"table":         confTable,
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// scenarioRow is one stored row of the scenario table as read back.
type scenarioRow struct {
	ID    int64
	Name  *string
	Score float64
	Flag  bool
}

// getReadBack GETs an emulator read-back URL and decodes its JSON body
// (numbers kept exact).
func getReadBack(t testing.TB, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read back GET %s: %s: %s", url, resp.Status, body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("read back GET %s: %v", url, err)
	}
}

// rowCount is the table's row_count from GET /emulator/v1/tables/{table}.
func rowCount(t testing.TB, srv *emulator.Server) int64 {
	t.Helper()
	var info struct {
		RowCount json.Number `json:"row_count"`
	}
	getReadBack(t, srv.HTTPURL()+"/emulator/v1/tables/"+confTable, &info)
	n, err := info.RowCount.Int64()
	if err != nil {
		t.Fatalf("row_count %q: %v", info.RowCount, err)
	}
	return n
}

// readBack reads every stored row of the scenario table through the
// emulator's HTTP read-back (GET /emulator/v1/tables/{table}/rows?limit=0).
func readBack(t testing.TB, srv *emulator.Server) []scenarioRow {
	t.Helper()
	var raw []map[string]any
	getReadBack(t, srv.HTTPURL()+"/emulator/v1/tables/"+confTable+"/rows?limit=0", &raw)
	out := make([]scenarioRow, 0, len(raw))
	for i, m := range raw {
		var r scenarioRow
		id, err := strconv.ParseInt(fmt.Sprint(m["id"]), 10, 64)
		if err != nil {
			t.Fatalf("row %d: id %v: %v", i, m["id"], err)
		}
		r.ID = id
		if s, ok := m["name"].(string); ok {
			r.Name = &s
		} else if m["name"] != nil {
			t.Fatalf("row %d: name %T %v", i, m["name"], m["name"])
		}
		if m["score"] != nil {
			if r.Score, err = strconv.ParseFloat(fmt.Sprint(m["score"]), 64); err != nil {
				t.Fatalf("row %d: score %v", i, m["score"])
			}
		}
		r.Flag, _ = m["flag"].(bool)
		out = append(out, r)
	}
	return out
}

// checkRows asserts the table holds every id in [0, n) with the scenario
// values, and nothing else. Duplicates fail when allowDup is false; with
// allowDup they are counted and returned (at-least-once delivery).
func checkRows(t testing.TB, srv *emulator.Server, n int64, allowDup bool) (duplicates int64) {
	t.Helper()
	count := rowCount(t, srv)
	rows := readBack(t, srv)
	if int64(len(rows)) != count {
		t.Fatalf("row_count %d but %d rows read back", count, len(rows))
	}
	seen := make(map[int64]int, n)
	for _, r := range rows {
		if r.ID < 0 || r.ID >= n {
			t.Fatalf("unexpected row id %d (want 0..%d)", r.ID, n-1)
		}
		seen[r.ID]++
		want := scenarioName(r.ID)
		switch {
		case want == nil && r.Name != nil:
			t.Fatalf("row %d: name = %q, want NULL", r.ID, *r.Name)
		case want != nil && (r.Name == nil || *r.Name != *want):
			t.Fatalf("row %d: name = %v, want %q", r.ID, r.Name, *want)
		}
		if r.Score != float64(r.ID)/2 || r.Flag != (r.ID%2 == 0) {
			t.Fatalf("row %d: score=%v flag=%v, want %v %v", r.ID, r.Score, r.Flag, float64(r.ID)/2, r.ID%2 == 0)
		}
	}
	var missing []int64
	for id := int64(0); id < n; id++ {
		switch c := seen[id]; {
		case c == 0:
			missing = append(missing, id)
		case c > 1:
			duplicates += int64(c - 1)
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		if len(missing) > 10 {
			missing = missing[:10]
		}
		t.Fatalf("rows lost: %d of %d ids missing (first: %v); table has %d rows", n-int64(len(seen)), n, missing, count)
	}
	if duplicates > 0 && !allowDup {
		t.Fatalf("%d duplicate rows in a run without faults", duplicates)
	}
	if count != n+duplicates {
		t.Fatalf("row_count %d != %d ids + %d duplicates", count, n, duplicates)
	}
	return duplicates
}

// tableStats are the emulator's counters for the scenario table (zero
// before any stream touched it).
func tableStats(srv *emulator.Server) emulator.TableStats {
	return srv.Stats().Tables[confTable]
}
