// Package healthhttp serves the zerobus outputs' stream health as JSON on
// the Benthos HTTP server (the one serving /ping and /metrics), at Path,
// with the connection state of the redpanda inputs beside it.
//
// Every zerobus output of one Benthos manager adds itself, under its label,
// to one Registry, which is mounted once: one endpoint lists them all, so
// several outputs never collide on a path. `?label=<label>` narrows the
// report to one output. The status is 200 unless an output is down (503):
// a table whose streams stopped (they heal only on reconnect), or rows
// waiting for their durable ack longer than the output's MaxAckAge.
//
// The package knows nothing of Benthos: it reaches the server through the
// value Resources.XUnwrapper returns (see Attach).
package healthhttp

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// Path is where the endpoint is mounted.
const Path = "/zerobus/health"

// Roles of a table in an output.
const (
	RoleTarget     = "target"      // the output's table (or one it routes to)
	RoleDeadLetter = "dead_letter" // the dead-letter table
	// RoleCoverage is a table's coverage table: a fault there is
	// degraded, never down, as the rows keep flowing without it.
	RoleCoverage = "coverage"
)

// Table is one table of an output.
type Table struct {
	Role string
	tablewriter.TableHealth
}

// Output is what the registry asks of one output.
type Output struct {
	// Health returns the output's tables; it must be cheap.
	Health func() []Table
	// MaxAckAge is how long rows may wait for their durable ack before the
	// output is reported down (the output's ack.timeout: past it, batches
	// are nacked).
	MaxAckAge time.Duration
}

// Statuses of an output and of the whole report.
const (
	StatusUp       = "up"       // every stream up, no ack older than MaxAckAge
	StatusDegraded = "degraded" // a stream is rebuilding (heals by itself)
	StatusDown     = "down"     // a stream stopped, or an ack is too old: HTTP 503
)

// Report is the endpoint's JSON body.
type Report struct {
	Status  string         `json:"status"`
	Outputs []OutputReport `json:"outputs"`
	// Inputs are the registered inputs (the redpanda input), if any.
	Inputs []InputReport `json:"inputs,omitempty"`
	// Processors are the processors that report their health (such as
	// schema_registry_decode, which holds batches while its registry is
	// unreachable); absent when none do.
	Processors []ProcessorReport `json:"processors,omitempty"`
}

// Input is what the registry asks of one input.
type Input struct {
	// Health returns the input's connection state; it must be cheap.
	Health func() InputHealth
}

// InputHealth is an input's connection state.
type InputHealth struct {
	Connected bool
	// Problem says why the input is not connected: "" before its first
	// attempt ended.
	Problem string
	// Since is when the problem started.
	Since time.Time
	// Attempts counts the failed attempts since then.
	Attempts int
}

// InputReport is one input: up when connected, down while it cannot
// connect (Problems say why), degraded before its first attempt ended.
type InputReport struct {
	Label          string   `json:"label"`
	Status         string   `json:"status"`
	Problems       []string `json:"problems,omitempty"`
	FailingSeconds float64  `json:"failing_seconds,omitempty"`
	FailedAttempts int      `json:"failed_attempts,omitempty"`
}

// Processor is what the registry asks of one processor.
type Processor struct {
	// Type is the processor's name, such as schema_registry_decode.
	Type string
	// Health returns its status (StatusUp, StatusDegraded or StatusDown)
	// and, when not up, why, one line each; it must be cheap.
	Health func() (status string, problems []string)
}

// ProcessorReport is one processor.
type ProcessorReport struct {
	Label    string   `json:"label"`
	Type     string   `json:"type"`
	Status   string   `json:"status"`
	Problems []string `json:"problems,omitempty"`
}

// OutputReport is one output.
type OutputReport struct {
	Label            string  `json:"label"`
	Status           string  `json:"status"`
	MaxAckAgeSeconds float64 `json:"max_ack_age_seconds"`
	// Problems say, one line each, why the output is not up.
	Problems []string      `json:"problems,omitempty"`
	Tables   []TableReport `json:"tables"`
}

// TableReport is one table of an output.
type TableReport struct {
	Table string `json:"table"`
	Role  string `json:"role"`
	State string `json:"state"`
	// Phase is where the table's writer is in its lifecycle (idle,
	// opening, open, waiting for table, backing off, draining, closed).
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// OldestPendingAgeSeconds is the age of the oldest rows waiting for
	// their durable ack on any stream; 0 when none wait.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	Budget                  Budget  `json:"budget"`
	// StreamWaiters counts writes waiting for a healthy stream.
	StreamWaiters int64          `json:"stream_waiters"`
	Streams       []StreamReport `json:"streams"`
}

// Budget is a table writer's in-flight byte budget.
type Budget struct {
	LimitBytes int64 `json:"limit_bytes"`
	InUseBytes int64 `json:"in_use_bytes"`
	// Waiters counts writes waiting for room in it (backpressure).
	Waiters int `json:"waiters"`
}

// StreamReport is one stream of a table.
type StreamReport struct {
	Index           int     `json:"index"`
	State           string  `json:"state"`
	StateAgeSeconds float64 `json:"state_age_seconds"`
	Generation      uint64  `json:"generation"`
	Rebuilds        int     `json:"rebuilds"`
	PendingRows     uint64  `json:"pending_rows"`
	PendingBatches  int64   `json:"pending_batches"`
	// LastAckAgeSeconds is null while the stream never confirmed rows.
	LastAckAgeSeconds       *float64 `json:"last_ack_age_seconds"`
	OldestPendingAgeSeconds float64  `json:"oldest_pending_age_seconds"`
	// LaneFullWriters counts writes waiting for room in the stream's full
	// ack lane (backpressure).
	LaneFullWriters int64  `json:"lane_full_writers"`
	LastError       string `json:"last_error,omitempty"`
}

// Registry holds the outputs of one Benthos manager. It is an
// http.Handler.
type Registry struct {
	mu         sync.Mutex
	outputs    map[string]Output
	inputs     map[string]Input
	processors map[string]Processor
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{outputs: map[string]Output{}, inputs: map[string]Input{}, processors: map[string]Processor{}}
}

// AddInput registers in under label ("redpanda" when empty; a label taken
// already gets a "#2", "#3"… suffix) and returns the name it got and the
// function that removes it (call it when the input closes).
func (r *Registry) AddInput(label string, in Input) (name string, remove func()) {
	if label == "" {
		label = "redpanda"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name = label
	for n := 2; ; n++ {
		if _, taken := r.inputs[name]; !taken {
			break
		}
		name = label + "#" + strconv.Itoa(n)
	}
	r.inputs[name] = in
	var once sync.Once
	return name, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.inputs, name)
			r.mu.Unlock()
		})
	}
}

// Add registers o under label ("zerobus" when empty; a label taken already
// gets a "#2", "#3"… suffix) and returns the name it got and the function
// that removes it (call it when the output closes).
func (r *Registry) Add(label string, o Output) (name string, remove func()) {
	if label == "" {
		label = "zerobus"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return addNamed(&r.mu, r.outputs, label, o)
}

// AddProcessor registers p under label (p.Type when empty), named as Add
// names outputs, and returns the name it got and the function that removes
// it (call it when the processor closes).
func (r *Registry) AddProcessor(label string, p Processor) (name string, remove func()) {
	if label == "" {
		label = p.Type
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return addNamed(&r.mu, r.processors, label, p)
}

// addNamed adds v to m under label, or label#2, #3… when taken; mu (held
// by the caller) guards m, and the returned remove takes it.
func addNamed[V any](mu *sync.Mutex, m map[string]V, label string, v V) (string, func()) {
	name := label
	for n := 2; ; n++ {
		if _, taken := m[name]; !taken {
			break
		}
		name = label + "#" + strconv.Itoa(n)
	}
	m[name] = v
	var once sync.Once
	return name, func() {
		once.Do(func() {
			mu.Lock()
			delete(m, name)
			mu.Unlock()
		})
	}
}

// Report builds the report of every output, or of the one named label
// (ok false when there is none).
func (r *Registry) Report(label string) (rep Report, ok bool) {
	r.mu.Lock()
	names, outs := pick(r.outputs, label)
	procNames, procs := pick(r.processors, label)
	var inNames []string
	var ins []Input
	if label == "" { // a label names an output or a processor
		inNames, ins = pick(r.inputs, "")
	}
	r.mu.Unlock()
	rep = Report{Status: StatusUp, Outputs: []OutputReport{}}
	for i, o := range outs {
		or := outputReport(names[i], o)
		rep.Status = worse(rep.Status, or.Status)
		rep.Outputs = append(rep.Outputs, or)
	}
	for i, in := range ins {
		ir := inputReport(inNames[i], in.Health())
		rep.Status = worse(rep.Status, ir.Status)
		rep.Inputs = append(rep.Inputs, ir)
	}
	for i, p := range procs {
		status, problems := p.Health()
		if !slices.Contains(statusOrder, status) {
			status = StatusDown
		}
		rep.Status = worse(rep.Status, status)
		rep.Processors = append(rep.Processors, ProcessorReport{Label: procNames[i], Type: p.Type, Status: status, Problems: problems})
	}
	return rep, label == "" || len(names) > 0 || len(procNames) > 0
}

// pick returns the names in m that label selects (every name when label is
// empty), sorted, and their values in the same order.
func pick[V any](m map[string]V, label string) ([]string, []V) {
	var names []string
	for n := range m {
		if label == "" || n == label {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	vals := make([]V, len(names))
	for i, n := range names {
		vals[i] = m[n]
	}
	return names, vals
}

func inputReport(label string, h InputHealth) InputReport {
	ir := InputReport{Label: label, Status: StatusUp}
	switch {
	case h.Connected:
	case h.Problem == "":
		ir.Status = StatusDegraded
		ir.Problems = []string{"connecting"}
	default:
		ir.Status = StatusDown
		ir.Problems = []string{h.Problem}
		ir.FailedAttempts = h.Attempts
		if !h.Since.IsZero() {
			ir.FailingSeconds = time.Since(h.Since).Seconds()
		}
	}
	return ir
}

// ServeHTTP writes the report as JSON: 200 unless an output, an input or a
// processor is down (503), 404 for an unknown ?label= (which names outputs
// and processors only).
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rep, ok := r.Report(req.URL.Query().Get("label"))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case !ok:
		w.WriteHeader(http.StatusNotFound)
	case rep.Status == StatusDown:
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}

func outputReport(label string, o Output) OutputReport {
	or := OutputReport{Label: label, Status: StatusUp, MaxAckAgeSeconds: o.MaxAckAge.Seconds(), Tables: []TableReport{}}
	for _, t := range o.Health() {
		tr := tableReport(t)
		failing := StatusDown
		if t.Role == RoleCoverage {
			failing = StatusDegraded
		}
		switch t.State {
		case tablewriter.StateStopped:
			or.Status = worse(or.Status, failing)
			or.Problems = append(or.Problems, fmt.Sprintf("table %s: stopped: %s", t.Table, cmp.Or(t.Reason, stoppedStreamError(t))))
		case tablewriter.StateRebuilding:
			or.Status = worse(or.Status, StatusDegraded)
			or.Problems = append(or.Problems, fmt.Sprintf("table %s: rebuilding: %s", t.Table, cmp.Or(t.Reason, "a stream is being rebuilt")))
		}
		if down := t.Age(t.Unreachable); !t.Unreachable.IsZero() && down >= tablewriter.OutageGrace {
			// Every stream lost its connection: the endpoint or the path
			// to it is down, whatever the pool still calls the streams.
			or.Status = worse(or.Status, failing)
			or.Problems = append(or.Problems, fmt.Sprintf("table %s: no stream connected for %s: %s", t.Table, down.Round(100*time.Millisecond), t.Reason))
		}
		if age := t.OldestPendingAge(); o.MaxAckAge > 0 && age > o.MaxAckAge {
			or.Status = worse(or.Status, failing)
			or.Problems = append(or.Problems, fmt.Sprintf("table %s: rows wait %s for their durable ack, over %s (slow acks: see the runbook)",
				t.Table, age.Round(time.Second), o.MaxAckAge))
		}
		or.Tables = append(or.Tables, tr)
	}
	return or
}

func tableReport(t Table) TableReport {
	tr := TableReport{
		Table: t.Table, Role: t.Role, State: string(t.State), Phase: t.Phase, Reason: t.Reason,
		OldestPendingAgeSeconds: t.OldestPendingAge().Seconds(),
		Budget:                  Budget{LimitBytes: t.BudgetLimitBytes, InUseBytes: t.BudgetInUseBytes, Waiters: t.BudgetWaiters},
		StreamWaiters:           t.StreamWaiters,
		Streams:                 []StreamReport{},
	}
	for _, s := range t.Streams {
		sr := StreamReport{
			Index: s.Index, State: string(s.State), StateAgeSeconds: t.Age(s.Since).Seconds(),
			Generation: s.Generation, Rebuilds: s.Rebuilds,
			PendingRows: s.PendingRows, PendingBatches: s.PendingBatches,
			OldestPendingAgeSeconds: t.Age(s.OldestPending).Seconds(),
			LaneFullWriters:         s.LaneFullWriters, LastError: s.LastError,
		}
		if !s.LastAck.IsZero() {
			a := t.Age(s.LastAck).Seconds()
			sr.LastAckAgeSeconds = &a
		}
		tr.Streams = append(tr.Streams, sr)
	}
	return tr
}

func stoppedStreamError(t Table) string {
	for _, s := range t.Streams {
		if s.State == tablewriter.StateStopped && s.LastError != "" {
			return fmt.Sprintf("stream %d: %s", s.Index, s.LastError)
		}
	}
	return "streams stopped"
}

// statusOrder ranks the statuses from best to worst.
var statusOrder = []string{StatusUp, StatusDegraded, StatusDown}

// worse returns the worse of two statuses.
func worse(a, b string) string {
	if slices.Index(statusOrder, b) > slices.Index(statusOrder, a) {
		return b
	}
	return a
}

// Resources is the part of Benthos's *service.Resources Attach uses.
type Resources interface {
	GetOrSetGeneric(key, value any) (actual any, loaded bool)
	XUnwrapper() any
}

// registryKey keys the manager's registry among its generic values.
type registryKey struct{}

// Attach adds o under label to the registry of res's manager, creating
// and mounting it at Path on the first call, and returns the name it got
// and the function that removes it. err is non-nil only on the call that
// tried to mount the endpoint and could not: log it once; the output works
// without the endpoint.
func Attach(res Resources, label string, o Output) (name string, remove func(), err error) {
	reg, err := registryOf(res)
	name, remove = reg.Add(label, o)
	return name, remove, err
}

// AttachProcessor is Attach for a processor.
func AttachProcessor(res Resources, label string, p Processor) (name string, remove func(), err error) {
	reg, err := registryOf(res)
	name, remove = reg.AddProcessor(label, p)
	return name, remove, err
}

// registryOf returns the registry of res's manager, creating and mounting
// it on the first call (err: the mount failed, on that call only).
func registryOf(res Resources) (reg *Registry, err error) {
	v, loaded := res.GetOrSetGeneric(registryKey{}, NewRegistry())
	reg = v.(*Registry)
	if !loaded {
		err = Mount(res.XUnwrapper(), reg.ServeHTTP)
	}
	return reg, err
}

// AttachInput adds in under label to the registry of res's manager, like
// Attach does an output.
func AttachInput(res Resources, label string, in Input) (name string, remove func(), err error) {
	reg, err := registryOf(res)
	name, remove = reg.AddInput(label, in)
	return name, remove, err
}

// endpointRegistrar is the method of Benthos's internal manager that
// mounts a server-wide endpoint; the public API does not offer it.
type endpointRegistrar interface {
	RegisterEndpoint(path, desc string, h http.HandlerFunc)
}

// Mount registers h at Path through x: a registrar, or a value whose
// Unwrap() returns one (what Resources.XUnwrapper returns; its result type
// is internal to Benthos, hence the reflection). It fails, rather than
// panics, when the engine offers neither.
func Mount(x any, h http.HandlerFunc) (err error) {
	const desc = "Per-stream health of the zerobus outputs, the connection of the redpanda inputs, and processors that hold batches (JSON): 503 when streams stopped, acks are too old, an input cannot connect or a processor is down."
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("healthhttp: registering %s panicked: %v", Path, p)
		}
	}()
	if r, ok := x.(endpointRegistrar); ok {
		r.RegisterEndpoint(Path, desc, h)
		return nil
	}
	if x == nil {
		return errors.New("healthhttp: no resources to register the endpoint with")
	}
	m := reflect.ValueOf(x).MethodByName("Unwrap")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return fmt.Errorf("healthhttp: %T has no Unwrap() method: this Benthos version offers no way to register %s", x, Path)
	}
	out := m.Call(nil)[0]
	if (out.Kind() == reflect.Interface || out.Kind() == reflect.Pointer) && out.IsNil() {
		return fmt.Errorf("healthhttp: %T.Unwrap() returned nil", x)
	}
	r, ok := out.Interface().(endpointRegistrar)
	if !ok {
		return fmt.Errorf("healthhttp: %T has no RegisterEndpoint method: this Benthos version offers no way to register %s", out.Interface(), Path)
	}
	r.RegisterEndpoint(Path, desc, h)
	return nil
}

// Tables lists the tables of an output's engine: its static table's writer,
// or every table its router holds open, then their coverage tables' writers,
// then its dead-letter writer. With no
// engine or an empty one (not connected yet), the output's table is
// reported rebuilding.
func Tables(table string, e *tablewriter.Engine) []Table {
	var ts []Table
	if e == nil || e.Writer == nil && e.Router == nil && e.DeadLetters == nil {
		return append(ts, Table{Role: RoleTarget, TableHealth: tablewriter.TableHealth{
			Table: table, At: time.Now(), State: tablewriter.StateRebuilding, Reason: "not connected yet"}})
	}
	if e.Writer != nil {
		ts = append(ts, Table{Role: RoleTarget, TableHealth: e.Writer.Health()})
	}
	if e.Router != nil {
		for _, h := range e.Router.Health() {
			ts = append(ts, Table{Role: RoleTarget, TableHealth: h})
		}
	}
	for _, h := range e.CoverageHealth() {
		ts = append(ts, Table{Role: RoleCoverage, TableHealth: h})
	}
	if w := e.DeadLetterWriter(); w != nil {
		ts = append(ts, Table{Role: RoleDeadLetter, TableHealth: w.Health()})
	}
	return ts
}
