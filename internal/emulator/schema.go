package emulator

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Schema validation causes, as the service names them in ErrorInfo metadata.
const (
	CauseFieldNotInTable        = "FIELD_NOT_IN_TABLE"
	CauseMissingRequiredColumn  = "MISSING_REQUIRED_COLUMN"
	CauseFieldOutOfOrder        = "FIELD_OUT_OF_ORDER"
	CauseTypeIncompatible       = "TYPE_INCOMPATIBLE"
	CauseFieldCountMismatch     = "FIELD_COUNT_MISMATCH"
	SchemaValidationReason      = "SCHEMA_VALIDATION_FAILED"
	ErrorDomain                 = "zerobus.databricks.com"
	schemaValidationErrorCode   = "8001"
	streamTimeoutErrorCode      = "6002"
	streamTimeoutMessage        = "Stream timeout reached"
	nonIncrementalOffsetMessage = "Non-incremental offset: expected %d, actual %d"
)

type schemaProblem struct {
	cause string
	msg   string
}

// checkSchema compares a stream's Arrow schema with the table's columns the
// way the service does: every field must be a column, in UC column order,
// with the expected Arrow type (map entry names aside) and nullability; NOT
// NULL columns may not be omitted, nullable ones may. It returns the problems
// found, in field order.
func checkSchema(cols []typemap.Column, got *arrow.Schema) ([]schemaProblem, error) {
	want, err := typemap.ArrowSchema(cols)
	if err != nil {
		return nil, fmt.Errorf("table schema has no Arrow form: %w", err)
	}
	pos := make(map[string]int, len(cols))
	for i, f := range want.Fields() {
		pos[f.Name] = i
	}
	var probs []schemaProblem
	if got.NumFields() > want.NumFields() {
		probs = append(probs, schemaProblem{CauseFieldCountMismatch,
			fmt.Sprintf("stream has %d fields, the table has %d columns", got.NumFields(), want.NumFields())})
	}
	present := map[string]bool{}
	last := -1
	for _, f := range got.Fields() {
		i, ok := pos[f.Name]
		if !ok {
			probs = append(probs, schemaProblem{CauseFieldNotInTable, fmt.Sprintf("field %q is not a column of the table", f.Name)})
			continue
		}
		if present[f.Name] {
			probs = append(probs, schemaProblem{CauseFieldCountMismatch, fmt.Sprintf("field %q appears more than once", f.Name)})
			continue
		}
		present[f.Name] = true
		if i < last {
			probs = append(probs, schemaProblem{CauseFieldOutOfOrder, fmt.Sprintf("field %q is out of order (table position %d)", f.Name, i)})
		}
		if i > last {
			last = i
		}
		wf := want.Field(i)
		if !sameType(wf.Type, f.Type) {
			probs = append(probs, schemaProblem{CauseTypeIncompatible,
				fmt.Sprintf("field %q has type %s, column %s (%s) needs %s", f.Name, f.Type, wf.Name, cols[i].Type.Text(), wf.Type)})
		} else if wf.Nullable != f.Nullable {
			probs = append(probs, schemaProblem{CauseTypeIncompatible,
				fmt.Sprintf("field %q has nullable=%v, column %s needs nullable=%v", f.Name, f.Nullable, wf.Name, wf.Nullable)})
		}
	}
	for _, c := range cols {
		if !c.Nullable && !present[c.Name] {
			probs = append(probs, schemaProblem{CauseMissingRequiredColumn, fmt.Sprintf("NOT NULL column %q is missing", c.Name)})
		}
	}
	return probs, nil
}

// sameType compares Arrow types structurally: field names of struct members
// must match, but the child names of lists and map entries ("item"/"element",
// "entries"/"key_value", "key"/"keys", "value"/"values") are ignored, since
// writers disagree on them. Nested nullability must match.
func sameType(want, got arrow.DataType) bool {
	if want.ID() != got.ID() {
		return false
	}
	switch w := want.(type) {
	case *arrow.TimestampType:
		g := got.(*arrow.TimestampType)
		return w.Unit == g.Unit && w.TimeZone == g.TimeZone
	case *arrow.ListType:
		g := got.(*arrow.ListType)
		return w.ElemField().Nullable == g.ElemField().Nullable && sameType(w.Elem(), g.Elem())
	case *arrow.MapType:
		g := got.(*arrow.MapType)
		return w.ItemField().Nullable == g.ItemField().Nullable &&
			sameType(w.KeyType(), g.KeyType()) && sameType(w.ItemType(), g.ItemType())
	case *arrow.StructType:
		g := got.(*arrow.StructType)
		if w.NumFields() != g.NumFields() {
			return false
		}
		for i := 0; i < w.NumFields(); i++ {
			wf, gf := w.Field(i), g.Field(i)
			if wf.Name != gf.Name || wf.Nullable != gf.Nullable || !sameType(wf.Type, gf.Type) {
				return false
			}
		}
		return true
	}
	return arrow.TypeEqual(want, got)
}

// schemaError is the status the service returns for a schema mismatch:
// INVALID_ARGUMENT with a google.rpc.ErrorInfo naming the causes.
func schemaError(t workspace.Table, probs []schemaProblem) error {
	var causes, msgs []string
	seen := map[string]bool{}
	for _, p := range probs {
		msgs = append(msgs, p.msg)
		if !seen[p.cause] {
			seen[p.cause] = true
			causes = append(causes, p.cause)
		}
	}
	st := status.New(codes.InvalidArgument, fmt.Sprintf(
		"Schema validation failed for table %s: %s. Error Code: %s", t.FullName, strings.Join(msgs, "; "), schemaValidationErrorCode))
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   SchemaValidationReason,
		Domain:   ErrorDomain,
		Metadata: map[string]string{"causes": strings.Join(causes, ","), "error_code": schemaValidationErrorCode},
	})
	if err != nil {
		return st.Err()
	}
	return withInfo.Err()
}

func rotationError() error {
	return status.Errorf(codes.Unavailable, "Stream closed by the server for rotation. Error Code: %s %s", streamTimeoutErrorCode, streamTimeoutMessage)
}
