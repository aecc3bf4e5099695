package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// The primary-raw preconditions, as named in Unmet.Precondition (and in the
// output's logs and metrics).
const (
	PreRegistered      = "registered"
	PreIcebergReads    = "iceberg_reads"
	PreColumnMapping   = "column_mapping"
	PreProtocol        = "protocol_versions"
	PreDeletionVectors = "deletion_vectors_off"
	PreColumnTypes     = "iceberg_column_types"
)

// Unmet is one primary-raw precondition a table fails.
type Unmet struct {
	Precondition string
	Detail       string
}

func (u Unmet) String() string { return u.Precondition + ": " + u.Detail }

// PreconditionError refuses the primary-raw role for a table.
type PreconditionError struct {
	Table string
	Unmet []Unmet
}

func (e *PreconditionError) Error() string {
	parts := make([]string, len(e.Unmet))
	for i, u := range e.Unmet {
		parts[i] = u.String()
	}
	return fmt.Sprintf("catalog: table %s cannot hold the primary_raw role: %s", e.Table, strings.Join(parts, "; "))
}

// CheckPrimaryRaw returns the primary-raw preconditions a table fails (none
// means eligible): registered in the catalog as a MANAGED or EXTERNAL table;
// Iceberg reads on (UniForm iceberg and IcebergCompatV2); column mapping by
// name or id; protocol at least reader 2 / writer 7; deletion vectors not
// enabled (they silently remove recovery's read path); no VARIANT column.
func CheckPrimaryRaw(state *TableState) []Unmet {
	if state == nil {
		return []Unmet{{PreRegistered, "the table does not exist in the catalog"}}
	}
	var out []Unmet
	if t := strings.ToUpper(state.TableType); t != "MANAGED" && t != "EXTERNAL" {
		out = append(out, Unmet{PreRegistered, fmt.Sprintf("table type is %q, want MANAGED or EXTERNAL", state.TableType)})
	}
	p := state.Properties
	if !IcebergReadsOn(p) || !strings.EqualFold(p[PropIcebergCompatV2], "true") {
		out = append(out, Unmet{PreIcebergReads, fmt.Sprintf("want %s containing iceberg and %s=true, have %q and %q",
			PropUniversalFormats, PropIcebergCompatV2, p[PropUniversalFormats], p[PropIcebergCompatV2])})
	}
	if !columnMappingOn(p) {
		out = append(out, Unmet{PreColumnMapping, fmt.Sprintf("want %s name or id, have %q", PropColumnMappingMode, p[PropColumnMappingMode])})
	}
	r, rerr := strconv.Atoi(p[PropMinReaderVersion])
	w, werr := strconv.Atoi(p[PropMinWriterVersion])
	if rerr != nil || werr != nil || r < minReaderForIcebergReads || w < minWriterForIcebergReads {
		out = append(out, Unmet{PreProtocol, fmt.Sprintf("want reader >= %d and writer >= %d, have %s=%q and %s=%q",
			minReaderForIcebergReads, minWriterForIcebergReads, PropMinReaderVersion, p[PropMinReaderVersion], PropMinWriterVersion, p[PropMinWriterVersion])})
	}
	if strings.EqualFold(p[PropDeletionVectors], "true") {
		out = append(out, Unmet{PreDeletionVectors, fmt.Sprintf("%s=true: deletion vectors remove recovery's Iceberg read path", PropDeletionVectors)})
	}
	var variants []string
	for _, c := range state.Columns {
		if c.Type.Contains(typemap.Variant) {
			variants = append(variants, c.Name)
		}
	}
	if len(variants) > 0 {
		out = append(out, Unmet{PreColumnTypes, fmt.Sprintf("VARIANT columns cannot be read through Iceberg: %s", strings.Join(variants, ", "))})
	}
	return out
}

// RecheckPrimaryRaw describes the table afresh (never a cached verdict: a
// property can change under a running pipeline) and checks it. It returns a
// *PreconditionError when a precondition is unmet, the describe error when
// the catalog cannot be read, nil when the table is eligible.
func RecheckPrimaryRaw(ctx context.Context, cat TableCatalog, table string) error {
	state, err := cat.Describe(ctx, table)
	if err != nil {
		return fmt.Errorf("re-check primary_raw preconditions of %s: %w", table, err)
	}
	if unmet := CheckPrimaryRaw(state); len(unmet) > 0 {
		return &PreconditionError{Table: table, Unmet: unmet}
	}
	return nil
}

// WatchPrimaryRaw re-checks the primary-raw preconditions every interval
// until ctx ends, calling onChange with the first verdict and with every
// verdict that differs from the previous one (nil error = eligible). A
// describe failure is reported as a verdict too, so the caller can decide to
// stop writing when it cannot confirm eligibility. It blocks; run it in a
// goroutine.
func WatchPrimaryRaw(ctx context.Context, cat TableCatalog, table string, interval time.Duration, onChange func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	first := true
	for {
		err := RecheckPrimaryRaw(ctx, cat, table)
		if ctx.Err() != nil {
			return
		}
		if v := verdictKey(err); first || v != last {
			first, last = false, v
			onChange(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func verdictKey(err error) string {
	if err == nil {
		return ""
	}
	var pe *PreconditionError
	if errors.As(err, &pe) {
		names := make([]string, len(pe.Unmet))
		for i, u := range pe.Unmet {
			names[i] = u.String()
		}
		slices.Sort(names)
		return "unmet:" + strings.Join(names, "|")
	}
	return "error:" + err.Error()
}
