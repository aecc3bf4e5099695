package emulator

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// Faults are the emulator's fault-injection settings. The zero value injects
// nothing.
type Faults struct {
	// AckLatency delays every ack by this long after the batch arrived.
	AckLatency time.Duration
	// StreamLifetime rotates streams: after this long the server sends a
	// close signal ({"close_stream_duration_ms":…} on Flight), then ends the
	// call UNAVAILABLE "… Error Code: 6002 Stream timeout reached" once
	// RotationGrace has passed (a client that half-closes earlier gets OK).
	StreamLifetime time.Duration
	// RotationGrace is the close_stream_duration announced at rotation;
	// 0 means 2s.
	RotationGrace time.Duration
	// ErrorRate maps a gRPC code name ("UNAVAILABLE", "INTERNAL", …) to the
	// probability that a received batch fails the stream with that code.
	ErrorRate map[string]float64
	// MaxStreamsPerTable caps concurrent streams per table; opening one more
	// fails RESOURCE_EXHAUSTED. 0 means no cap.
	MaxStreamsPerTable int
	// AckStall stops acks (rows are still stored) until it is cleared.
	AckStall bool
	// OpenError refuses every new stream open with this gRPC code name
	// ("UNAVAILABLE", "PERMISSION_DENIED", "NOT_FOUND", …) before the
	// ready signal, while the streams already open keep writing: a fault
	// at stream open. The service's refusal is a status on the open call
	// (CreateStreamError in databricks/zerobus-sdk rust/sdk/src/errors.rs,
	// retryable unless its code is in UNRETRIABLE_STATUS_CODES); the text
	// it carries is not published, so the message here is an assumption.
	// The refused open is counted in StreamsRejected. "" refuses nothing.
	OpenError string
	// AckOnly acks batches without storing them (for transport benchmarks):
	// a batch is counted from its IPC header and its body is not decoded,
	// so neither its nulls nor its values are checked (the stream's offset,
	// empty-batch and error-rate rules still apply). The emulator then
	// costs the client's machine about what an ack from the service would:
	// frames are decoded with one copy (flightCodec), a counted frame's body
	// buffer is reused (releaseFrameBody), and the command started with
	// --ack-only runs on one CPU (ackOnlyProcs).
	AckOnly bool
	// Tables replaces AckLatency and AckStall for the named tables
	// (catalog.schema.table, case-insensitive): a test can stall the acks of
	// one table — say a coverage table — while the others are acked as
	// usual. Test-only fault injection, like every field here.
	Tables map[string]TableFaults
	// StreamMaxRowsPerSec and StreamMaxMBPerSec are per-stream throughput
	// quotas (MB = 10^6 bytes of requests as received); 0 means none. They
	// apply to every request received after they are set, on open streams
	// too. StreamQuotaMode says how a stream over its quota is treated:
	// QuotaBackpressure ("" too) or QuotaReject (see quota.go: both are
	// assumptions, the service does not document its mechanism).
	StreamMaxRowsPerSec int64
	StreamMaxMBPerSec   float64
	StreamQuotaMode     string
}

// TableFaults are the ack faults of one table (Faults.Tables).
type TableFaults struct {
	AckLatency time.Duration
	AckStall   bool
}

// ackFaults returns the ack latency and stall in force for table.
func (f *Faults) ackFaults(table string) (time.Duration, bool) {
	if t, ok := f.Tables[strings.ToLower(table)]; ok {
		return t.AckLatency, t.AckStall
	}
	return f.AckLatency, f.AckStall
}

const defaultRotationGrace = 2 * time.Second

// clone returns a copy of f sharing no map with it, with the table names of
// Tables lower-cased, as they are matched case-insensitively (ackFaults).
func (f Faults) clone() Faults {
	f.ErrorRate = maps.Clone(f.ErrorRate)
	if f.Tables != nil {
		out := make(map[string]TableFaults, len(f.Tables))
		for k, v := range f.Tables {
			out[strings.ToLower(k)] = v
		}
		f.Tables = out
	}
	return f
}

func (f *Faults) rotationGrace() time.Duration {
	if f.RotationGrace > 0 {
		return f.RotationGrace
	}
	return defaultRotationGrace
}

// Validate checks the code names and probabilities of ErrorRate and the
// signs of the durations.
func (f Faults) Validate() error {
	for name, p := range f.ErrorRate {
		if _, err := parseCode(name); err != nil {
			return err
		}
		if p < 0 || p > 1 {
			return fmt.Errorf("faults: error rate for %s is %v, want 0..1", name, p)
		}
	}
	if f.OpenError != "" {
		if _, err := parseCode(f.OpenError); err != nil {
			return fmt.Errorf("faults: open_error: %w", err)
		}
	}
	if f.AckLatency < 0 || f.StreamLifetime < 0 || f.RotationGrace < 0 || f.MaxStreamsPerTable < 0 {
		return fmt.Errorf("faults: durations and caps must not be negative")
	}
	if f.StreamMaxRowsPerSec < 0 || f.StreamMaxMBPerSec < 0 || math.IsNaN(f.StreamMaxMBPerSec) || math.IsInf(f.StreamMaxMBPerSec, 0) {
		return fmt.Errorf("faults: stream_max_rows_per_sec (%d) and stream_max_mb_per_sec (%v) must be finite and not negative",
			f.StreamMaxRowsPerSec, f.StreamMaxMBPerSec)
	}
	if err := checkQuotaMode(f.StreamQuotaMode); err != nil {
		return err
	}
	for name, t := range f.Tables {
		if strings.Count(name, ".") != 2 {
			return fmt.Errorf("faults: tables: %q is not catalog.schema.table", name)
		}
		if t.AckLatency < 0 {
			return fmt.Errorf("faults: tables: %s: ack_latency must not be negative", name)
		}
	}
	return nil
}

// parseCode maps "UNAVAILABLE", "unavailable" or "Unavailable" to its code.
func parseCode(name string) (codes.Code, error) {
	var c codes.Code
	upper := strings.ToUpper(strings.TrimSpace(name))
	if err := c.UnmarshalJSON([]byte(strconv.Quote(upper))); err == nil && c != codes.OK {
		return c, nil
	}
	for i := codes.Code(1); i <= codes.Unauthenticated; i++ {
		if strings.EqualFold(i.String(), name) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("faults: unknown or non-error gRPC code %q", name)
}

// pickError rolls the dice of ErrorRate for one batch. Codes are tried in a
// fixed order so a seeded test is reproducible.
func (f *Faults) pickError() (codes.Code, bool) {
	if len(f.ErrorRate) == 0 {
		return 0, false
	}
	names := make([]string, 0, len(f.ErrorRate))
	for n := range f.ErrorRate {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if p := f.ErrorRate[n]; p > 0 && rand.Float64() < p {
			if c, err := parseCode(n); err == nil {
				return c, true
			}
		}
	}
	return 0, false
}

// faultsJSON is the admin API form: durations as Go duration strings.
type faultsJSON struct {
	AckLatency         string                     `json:"ack_latency,omitempty"`
	StreamLifetime     string                     `json:"stream_lifetime,omitempty"`
	RotationGrace      string                     `json:"rotation_grace,omitempty"`
	ErrorRate          map[string]float64         `json:"error_rate,omitempty"`
	MaxStreamsPerTable int                        `json:"max_streams_per_table,omitempty"`
	AckStall           bool                       `json:"ack_stall"`
	OpenError          string                     `json:"open_error,omitempty"`
	AckOnly            bool                       `json:"ack_only"`
	Tables             map[string]tableFaultsJSON `json:"tables,omitempty"`
	StreamMaxRows      int64                      `json:"stream_max_rows_per_sec,omitempty"`
	StreamMaxMB        float64                    `json:"stream_max_mb_per_sec,omitempty"`
	StreamQuotaMode    string                     `json:"stream_quota_mode,omitempty"`
}

// tableFaultsJSON is the admin API form of TableFaults.
type tableFaultsJSON struct {
	AckLatency string `json:"ack_latency,omitempty"`
	AckStall   bool   `json:"ack_stall"`
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// MarshalJSON renders durations as strings such as "250ms".
func (f Faults) MarshalJSON() ([]byte, error) {
	var tables map[string]tableFaultsJSON
	if len(f.Tables) > 0 {
		tables = make(map[string]tableFaultsJSON, len(f.Tables))
		for k, v := range f.Tables {
			tables[k] = tableFaultsJSON{AckLatency: durString(v.AckLatency), AckStall: v.AckStall}
		}
	}
	return json.Marshal(faultsJSON{
		Tables:             tables,
		AckLatency:         durString(f.AckLatency),
		StreamLifetime:     durString(f.StreamLifetime),
		RotationGrace:      durString(f.RotationGrace),
		ErrorRate:          f.ErrorRate,
		MaxStreamsPerTable: f.MaxStreamsPerTable,
		AckStall:           f.AckStall,
		OpenError:          f.OpenError,
		AckOnly:            f.AckOnly,
		StreamMaxRows:      f.StreamMaxRowsPerSec,
		StreamMaxMB:        f.StreamMaxMBPerSec,
		StreamQuotaMode:    f.StreamQuotaMode,
	})
}

// UnmarshalJSON accepts durations as strings such as "250ms" or "1m".
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	var out Faults
	for _, d := range []struct {
		s   string
		dst *time.Duration
		n   string
	}{{j.AckLatency, &out.AckLatency, "ack_latency"}, {j.StreamLifetime, &out.StreamLifetime, "stream_lifetime"}, {j.RotationGrace, &out.RotationGrace, "rotation_grace"}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("faults: %s: %w", d.n, err)
		}
		*d.dst = v
	}
	out.ErrorRate = j.ErrorRate
	out.MaxStreamsPerTable = j.MaxStreamsPerTable
	out.AckStall = j.AckStall
	out.OpenError = j.OpenError
	out.AckOnly = j.AckOnly
	out.StreamMaxRowsPerSec = j.StreamMaxRows
	out.StreamMaxMBPerSec = j.StreamMaxMB
	out.StreamQuotaMode = strings.ToLower(j.StreamQuotaMode)
	for name, t := range j.Tables {
		tf := TableFaults{AckStall: t.AckStall}
		if t.AckLatency != "" {
			v, err := time.ParseDuration(t.AckLatency)
			if err != nil {
				return fmt.Errorf("faults: tables: %s: ack_latency: %w", name, err)
			}
			tf.AckLatency = v
		}
		if out.Tables == nil {
			out.Tables = map[string]TableFaults{}
		}
		out.Tables[name] = tf
	}
	*f = out
	return nil
}

// Stats are the emulator's counters since start.
type Stats struct {
	Tables map[string]TableStats `json:"tables"`
	// TokensIssued counts successful token responses; TokenFailures counts
	// refused token requests.
	TokensIssued  int64 `json:"tokens_issued"`
	TokenFailures int64 `json:"token_failures"`
	// Statements counts POST /api/2.0/sql/statements requests.
	Statements int64 `json:"statements"`
}

// TableStats are one table's counters.
type TableStats struct {
	// StreamsOpened counts streams that passed every check and got the ready
	// signal (or create_stream_response); StreamsRejected those refused at
	// open by the concurrency cap.
	StreamsOpened   int64 `json:"streams_opened"`
	StreamsRejected int64 `json:"streams_rejected"`
	// StreamsActive is the number open now; MaxConcurrentStreams the peak.
	StreamsActive        int64 `json:"streams_active"`
	MaxConcurrentStreams int64 `json:"max_concurrent_streams"`
	// BatchesReceived and RowsReceived count accepted ingest requests.
	BatchesReceived int64 `json:"batches_received"`
	RowsReceived    int64 `json:"rows_received"`
	// RowsAcked counts rows covered by acks sent.
	RowsAcked int64 `json:"rows_acked"`
	// RowsLeftUnacked counts the rows of streams the server ended itself
	// (a rotation's close period over, a refused batch, a failure) that it
	// had received and not acknowledged. Stored or not, a client resends
	// them, so they bound the duplicates at-least-once delivery allows. A
	// stream the client half-closed or cancelled adds nothing.
	RowsLeftUnacked int64 `json:"rows_left_unacked"`
	// RowCount is the number of rows stored (durable) in the table, replayed
	// ones included; Commits the Delta commits written since start;
	// DeltaVersion the latest Delta log version (-1: none).
	RowCount     int64 `json:"row_count"`
	Commits      int64 `json:"commits"`
	DeltaVersion int64 `json:"delta_version"`
	// Streams are the table's open streams and the last ended ones, oldest
	// first, each with its achieved rate.
	Streams []StreamStats `json:"streams,omitempty"`
}

type statsCollector struct {
	mu         sync.Mutex
	tables     map[string]*TableStats
	streams    map[string][]*streamStat // per table: open and recently ended
	streamSeq  map[string]int64
	tokens     int64
	tokenFails int64
	statements int64
}

func newStatsCollector() *statsCollector {
	return &statsCollector{tables: map[string]*TableStats{}, streams: map[string][]*streamStat{}, streamSeq: map[string]int64{}}
}

func (c *statsCollector) table(name string) *TableStats {
	t, ok := c.tables[name]
	if !ok {
		t = &TableStats{DeltaVersion: -1}
		c.tables[name] = t
	}
	return t
}

// rejectStream counts a stream refused at open by Faults.OpenError.
func (c *statsCollector) rejectStream(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.table(name).StreamsRejected++
}

// openStream admits a stream unless the table is at its cap.
func (c *statsCollector) openStream(name string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.table(name)
	if limit > 0 && t.StreamsActive >= int64(limit) {
		t.StreamsRejected++
		return false
	}
	t.StreamsActive++
	if t.StreamsActive > t.MaxConcurrentStreams {
		t.MaxConcurrentStreams = t.StreamsActive
	}
	return true
}

// streamReady counts a stream that got its ready signal and returns the
// record of its requests.
func (c *statsCollector) streamReady(name string) *streamStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.table(name).StreamsOpened++
	c.streamSeq[name]++
	st := &streamStat{id: c.streamSeq[name], active: true}
	c.streams[name] = append(c.streams[name], st)
	return st
}

// streamEnded marks st ended and forgets the oldest ended streams of the
// table beyond maxEndedStreams.
func (c *statsCollector) streamEnded(name string, st *streamStat) {
	st.mu.Lock()
	st.active = false
	st.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	list, ended := c.streams[name], 0
	for _, s := range list {
		if !s.snapshotActive() {
			ended++
		}
	}
	kept := list[:0]
	for _, s := range list {
		if ended > maxEndedStreams && !s.snapshotActive() {
			ended--
			continue
		}
		kept = append(kept, s)
	}
	c.streams[name] = kept
}

func (c *statsCollector) closeStream(name string) {
	c.mu.Lock()
	c.table(name).StreamsActive--
	c.mu.Unlock()
}

func (c *statsCollector) batch(name string, rows int64) {
	c.mu.Lock()
	t := c.table(name)
	t.BatchesReceived++
	t.RowsReceived += rows
	c.mu.Unlock()
}

func (c *statsCollector) acked(name string, rows int64) {
	c.mu.Lock()
	c.table(name).RowsAcked += rows
	c.mu.Unlock()
}

// rowsAcked sums the rows acknowledged to the tables named with prefix.
func (c *statsCollector) rowsAcked(prefix string) (n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, t := range c.tables {
		if strings.HasPrefix(name, prefix) {
			n += t.RowsAcked
		}
	}
	return n
}

func (c *statsCollector) leftUnacked(name string, rows int64) {
	c.mu.Lock()
	c.table(name).RowsLeftUnacked += rows
	c.mu.Unlock()
}

func (c *statsCollector) add(field *int64, n int64) {
	c.mu.Lock()
	*field += n
	c.mu.Unlock()
}

func (c *statsCollector) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Stats{Tables: make(map[string]TableStats, len(c.tables)), TokensIssued: c.tokens, TokenFailures: c.tokenFails, Statements: c.statements}
	for k, v := range c.tables {
		t := *v
		for _, st := range c.streams[k] {
			t.Streams = append(t.Streams, st.snapshot())
		}
		out.Tables[k] = t
	}
	return out
}
