package catalog

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func eligible() *TableState {
	props := PrimaryRawProperties()
	return &TableState{FullName: tbl, TableType: "MANAGED", Properties: props,
		Columns: []typemap.Column{col("id", "bigint", true, ""), col("s", "struct<a:array<int>>", true, "")}}
}

func TestCheckPrimaryRaw(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *TableState) *TableState
		unmet  []string
	}{
		{name: "eligible", mutate: func(s *TableState) *TableState { return s }},
		{name: "external is eligible too", mutate: func(s *TableState) *TableState { s.TableType = "EXTERNAL"; return s }},
		{name: "column mapping by id", mutate: func(s *TableState) *TableState { s.Properties[PropColumnMappingMode] = "id"; return s }},
		{name: "deletion vectors absent is fine", mutate: func(s *TableState) *TableState { delete(s.Properties, PropDeletionVectors); return s }},
		{name: "higher protocol is fine", mutate: func(s *TableState) *TableState { s.Properties[PropMinReaderVersion] = "3"; return s }},
		{name: "several formats", mutate: func(s *TableState) *TableState { s.Properties[PropUniversalFormats] = "hudi, iceberg"; return s }},
		{name: "absent", mutate: func(*TableState) *TableState { return nil }, unmet: []string{PreRegistered}},
		{name: "a view", mutate: func(s *TableState) *TableState { s.TableType = "VIEW"; return s }, unmet: []string{PreRegistered}},
		{name: "deletion vectors on", mutate: func(s *TableState) *TableState { s.Properties[PropDeletionVectors] = "true"; return s },
			unmet: []string{PreDeletionVectors}},
		{name: "uniform off", mutate: func(s *TableState) *TableState { delete(s.Properties, PropUniversalFormats); return s },
			unmet: []string{PreIcebergReads}},
		{name: "iceberg compat off", mutate: func(s *TableState) *TableState { s.Properties[PropIcebergCompatV2] = "false"; return s },
			unmet: []string{PreIcebergReads}},
		{name: "no column mapping", mutate: func(s *TableState) *TableState { s.Properties[PropColumnMappingMode] = "none"; return s },
			unmet: []string{PreColumnMapping}},
		{name: "old writer protocol", mutate: func(s *TableState) *TableState { s.Properties[PropMinWriterVersion] = "5"; return s },
			unmet: []string{PreProtocol}},
		{name: "old reader protocol", mutate: func(s *TableState) *TableState { s.Properties[PropMinReaderVersion] = "1"; return s },
			unmet: []string{PreProtocol}},
		{name: "protocol unknown", mutate: func(s *TableState) *TableState { delete(s.Properties, PropMinReaderVersion); return s },
			unmet: []string{PreProtocol}},
		{name: "variant column", mutate: func(s *TableState) *TableState {
			s.Columns = append(s.Columns, col("v", "map<string,variant>", true, ""))
			return s
		}, unmet: []string{PreColumnTypes}},
		{name: "plain delta table", mutate: func(s *TableState) *TableState {
			s.Properties = map[string]string{PropDeletionVectors: "true"}
			return s
		}, unmet: []string{PreIcebergReads, PreColumnMapping, PreProtocol, PreDeletionVectors}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			unmet := CheckPrimaryRaw(tc.mutate(eligible()))
			for _, u := range unmet {
				got = append(got, u.Precondition)
				assert.NotEmpty(t, u.Detail)
			}
			assert.Equal(t, tc.unmet, got, "%v", unmet)
		})
	}
}

// fakeCatalog serves Describe from a mutable state and counts calls.
type fakeCatalog struct {
	mu    sync.Mutex
	state *TableState
	err   error
	calls int
}

func (f *fakeCatalog) set(s *TableState, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.err = s, err
}

func (f *fakeCatalog) Describe(context.Context, string) (*TableState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.state == nil {
		return nil, f.err
	}
	s := *f.state
	s.Properties = maps.Clone(f.state.Properties)
	return &s, f.err
}
func (f *fakeCatalog) Reconcile(context.Context, DesiredTable) (ReconcileOutcome, error) {
	return ReconcileOutcome{}, errors.New("unused")
}
func (f *fakeCatalog) RegisterWriter(context.Context, string, WriterInfo) error {
	return errors.New("unused")
}
func (f *fakeCatalog) VendCredentials(context.Context, string, Access) (*VendedCredentials, error) {
	return nil, errors.New("unused")
}

func TestRecheckPrimaryRawAlwaysDescribes(t *testing.T) {
	f := &fakeCatalog{state: eligible()}
	ctx := context.Background()
	require.NoError(t, RecheckPrimaryRaw(ctx, f, tbl))

	flipped := eligible()
	flipped.Properties[PropDeletionVectors] = "true"
	f.set(flipped, nil)
	err := RecheckPrimaryRaw(ctx, f, tbl)
	var pe *PreconditionError
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Unmet, 1)
	assert.Equal(t, PreDeletionVectors, pe.Unmet[0].Precondition)
	assert.Contains(t, err.Error(), tbl)
	assert.Equal(t, 2, f.calls, "every re-check describes")

	f.set(nil, errors.New("boom"))
	err = RecheckPrimaryRaw(ctx, f, tbl)
	require.Error(t, err)
	assert.False(t, errors.As(err, &pe), "a describe failure is not a verdict of unmet preconditions")
}

func TestWatchPrimaryRawReportsChanges(t *testing.T) {
	f := &fakeCatalog{state: eligible()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	verdicts := make(chan error, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchPrimaryRaw(ctx, f, tbl, 5*time.Millisecond, func(err error) { verdicts <- err })
	}()
	next := func() error {
		select {
		case err := <-verdicts:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("no verdict")
			return nil
		}
	}
	require.NoError(t, next(), "first verdict is always reported")

	flipped := eligible()
	flipped.Properties[PropDeletionVectors] = "true"
	f.set(flipped, nil)
	var pe *PreconditionError
	require.ErrorAs(t, next(), &pe)
	assert.Equal(t, PreDeletionVectors, pe.Unmet[0].Precondition)

	f.set(eligible(), nil)
	require.NoError(t, next(), "recovery is reported")
	cancel()
	<-done
	select {
	case err := <-verdicts:
		t.Fatalf("unchanged verdicts must not be reported again: %v", err)
	default:
	}
}
