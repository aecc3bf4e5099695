package healthhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

func tableAt(state tablewriter.StreamState, pendingSince time.Duration) tablewriter.TableHealth {
	now := time.Now()
	s := tablewriter.StreamHealth{Index: 0, State: state, Since: now.Add(-time.Minute), Generation: 1, PendingRows: 10, PendingBatches: 1}
	if pendingSince > 0 {
		s.OldestPending = now.Add(-pendingSince)
	}
	return tablewriter.TableHealth{Table: "c.s.t", At: now, State: state, Streams: []tablewriter.StreamHealth{s}}
}

func fixed(ts ...tablewriter.TableHealth) func() []Table {
	return func() []Table {
		out := make([]Table, len(ts))
		for i, t := range ts {
			out[i] = Table{Role: RoleTarget, TableHealth: t}
		}
		return out
	}
}

func get(t *testing.T, h http.Handler, url string) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
	var rep Report
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep), rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Code, rep
}

// 200 while every stream is up or heals by itself; 503 once one stopped or
// rows wait longer than MaxAckAge, with the reason; ?label= narrows.
func TestRegistryStatusCodes(t *testing.T) {
	reg := NewRegistry()
	_, removeA := reg.Add("a", Output{Health: fixed(tableAt(tablewriter.StateUp, time.Second)), MaxAckAge: time.Minute})
	code, rep := get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, StatusUp, rep.Status)
	require.Len(t, rep.Outputs, 1)
	s := rep.Outputs[0].Tables[0].Streams[0]
	assert.Equal(t, "up", s.State)
	assert.InDelta(t, 1.0, s.OldestPendingAgeSeconds, 0.5)
	assert.InDelta(t, 60.0, s.StateAgeSeconds, 0.5)
	assert.Nil(t, s.LastAckAgeSeconds, "never acked: null")
	assert.Equal(t, uint64(10), s.PendingRows)

	_, removeB := reg.Add("b", Output{Health: fixed(tableAt(tablewriter.StateRebuilding, 0)), MaxAckAge: time.Minute})
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code, "rebuilding heals by itself")
	assert.Equal(t, StatusDegraded, rep.Status)

	_, removeC := reg.Add("c", Output{Health: fixed(tableAt(tablewriter.StateUp, 2*time.Minute)), MaxAckAge: time.Minute})
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusServiceUnavailable, code, "rows waiting past MaxAckAge")
	assert.Equal(t, StatusDown, rep.Status)
	require.Len(t, rep.Outputs, 3)
	assert.Equal(t, "c", rep.Outputs[2].Label)
	require.Len(t, rep.Outputs[2].Problems, 1)
	assert.Contains(t, rep.Outputs[2].Problems[0], "durable ack")

	code, rep = get(t, reg, Path+"?label=a")
	assert.Equal(t, http.StatusOK, code, "narrowed to a healthy output")
	require.Len(t, rep.Outputs, 1)
	code, _ = get(t, reg, Path+"?label=nope")
	assert.Equal(t, http.StatusNotFound, code)

	removeC()
	removeB()
	_, removeS := reg.Add("a", Output{Health: fixed(tableAt(tablewriter.StateStopped, 0))})
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusServiceUnavailable, code, "a stopped stream")
	require.Len(t, rep.Outputs, 2)
	assert.Equal(t, "a#2", rep.Outputs[1].Label, "a label taken gets a suffix, not a collision")
	removeS()
	removeA()
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, rep.Outputs)
}

type registrar struct {
	paths []string
	h     http.HandlerFunc
}

func (r *registrar) RegisterEndpoint(path, _ string, h http.HandlerFunc) {
	r.paths = append(r.paths, path)
	r.h = h
}

type unwrapper struct{ r any }

func (u unwrapper) Unwrap() any { return u.r }

type typedUnwrapper struct{ r *registrar }

func (u typedUnwrapper) Unwrap() *registrar { return u.r }

// Mount finds RegisterEndpoint directly or behind Unwrap, whatever Unwrap's
// return type, and fails without panicking otherwise.
func TestMount(t *testing.T) {
	h := func(http.ResponseWriter, *http.Request) {}
	r := &registrar{}
	require.NoError(t, Mount(r, h))
	require.NoError(t, Mount(unwrapper{r}, h))
	require.NoError(t, Mount(typedUnwrapper{r}, h))
	assert.Equal(t, []string{Path, Path, Path}, r.paths)

	assert.ErrorContains(t, Mount(nil, h), "no resources")
	assert.ErrorContains(t, Mount(struct{}{}, h), "no Unwrap")
	assert.ErrorContains(t, Mount(unwrapper{struct{}{}}, h), "no RegisterEndpoint")
	assert.ErrorContains(t, Mount(unwrapper{nil}, h), "returned nil")
	assert.ErrorContains(t, Mount(typedUnwrapper{nil}, h), "returned nil")
}

type resources struct {
	generic map[any]any
	reg     *registrar
}

func (r *resources) GetOrSetGeneric(k, v any) (any, bool) {
	if old, ok := r.generic[k]; ok {
		return old, true
	}
	r.generic[k] = v
	return v, false
}

func (r *resources) XUnwrapper() any { return unwrapper{r.reg} }

// Two outputs of one manager share one endpoint, mounted once.
func TestAttachMountsOncePerManager(t *testing.T) {
	res := &resources{generic: map[any]any{}, reg: &registrar{}}
	n1, rm1, err := Attach(res, "", Output{Health: fixed(tableAt(tablewriter.StateUp, 0))})
	require.NoError(t, err)
	n2, rm2, err := Attach(res, "", Output{Health: fixed(tableAt(tablewriter.StateUp, 0))})
	require.NoError(t, err)
	defer rm1()
	defer rm2()
	assert.Equal(t, []string{Path}, res.reg.paths, "mounted once")
	assert.Equal(t, "zerobus", n1)
	assert.Equal(t, "zerobus#2", n2)
	code, rep := get(t, res.reg.h, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Len(t, rep.Outputs, 2)

	bad := &resources{generic: map[any]any{}}
	_, rm, err := Attach(bad, "x", Output{Health: fixed()})
	assert.Error(t, err, "the first output of a manager whose engine cannot mount it is told")
	rm()
}

// A coverage table that stopped, or whose rows wait too long, degrades the
// output without taking it down: the rows keep flowing without it. The same
// faults on the target table take it down.
func TestCoverageTableFaultsDegradeNeverDown(t *testing.T) {
	cov := func(th tablewriter.TableHealth) Table {
		th.Table = "c.s.t_zb_coverage"
		return Table{Role: RoleCoverage, TableHealth: th}
	}
	for _, tc := range []struct {
		name  string
		table tablewriter.TableHealth
	}{
		{"stopped", tableAt(tablewriter.StateStopped, 0)},
		{"ack too old", tableAt(tablewriter.StateUp, 2*time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := NewRegistry()
			_, remove := reg.Add("a", Output{MaxAckAge: time.Minute, Health: func() []Table {
				return []Table{{Role: RoleTarget, TableHealth: tableAt(tablewriter.StateUp, 0)}, cov(tc.table)}
			}})
			code, rep := get(t, reg, Path)
			assert.Equal(t, http.StatusOK, code)
			assert.Equal(t, StatusDegraded, rep.Status)
			require.Len(t, rep.Outputs[0].Problems, 1)
			assert.Contains(t, rep.Outputs[0].Problems[0], "c.s.t_zb_coverage")
			assert.Equal(t, RoleCoverage, rep.Outputs[0].Tables[1].Role)
			remove()

			_, remove = reg.Add("a", Output{MaxAckAge: time.Minute, Health: fixed(tc.table)})
			code, rep = get(t, reg, Path)
			assert.Equal(t, http.StatusServiceUnavailable, code, "the same fault on the target table")
			assert.Equal(t, StatusDown, rep.Status)
			remove()
		})
	}
}

// An input is up once connected, degraded while its first attempt runs,
// down (503) while it cannot connect, with the cause as its problem;
// ?label= narrows to outputs, which leaves the inputs out.
func TestRegistryInputs(t *testing.T) {
	reg := NewRegistry()
	_, removeOut := reg.Add("out", Output{Health: fixed(tableAt(tablewriter.StateUp, 0)), MaxAckAge: time.Minute})
	var h InputHealth
	name, remove := reg.AddInput("", Input{Health: func() InputHealth { return h }})
	assert.Equal(t, "redpanda", name)

	code, rep := get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, StatusDegraded, rep.Status, "connecting")
	require.Len(t, rep.Inputs, 1)
	assert.Equal(t, []string{"connecting"}, rep.Inputs[0].Problems)

	const cause = "kafka input: SASL refused: the broker closed the connection during SASL authentication (SCRAM-SHA-256 as user alice): check the password/mechanism (EOF)"
	h = InputHealth{Problem: cause, Since: time.Now().Add(-time.Minute), Attempts: 7}
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusServiceUnavailable, code, "an input that cannot connect is down")
	assert.Equal(t, StatusDown, rep.Status)
	require.Len(t, rep.Inputs, 1)
	in := rep.Inputs[0]
	assert.Equal(t, StatusDown, in.Status)
	assert.Equal(t, []string{cause}, in.Problems)
	assert.Equal(t, 7, in.FailedAttempts)
	assert.InDelta(t, 60, in.FailingSeconds, 5)

	code, rep = get(t, reg, Path+"?label=out")
	assert.Equal(t, http.StatusOK, code, "narrowed to the output")
	assert.Empty(t, rep.Inputs)

	_, remove2 := reg.AddInput("", Input{Health: func() InputHealth { return InputHealth{Connected: true} }})
	h = InputHealth{Connected: true}
	code, rep = get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, StatusUp, rep.Status)
	require.Len(t, rep.Inputs, 2)
	assert.Equal(t, "redpanda#2", rep.Inputs[1].Label)
	remove()
	remove2()
	removeOut()
	_, rep = get(t, reg, Path)
	assert.Empty(t, rep.Inputs)
}
