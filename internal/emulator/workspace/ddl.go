package workspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Table property keys the emulator interprets.
const (
	PropEnabledFormats     = "delta.universalFormat.enabledFormats"
	PropIcebergCompatV2    = "delta.enableIcebergCompatV2"
	PropColumnMappingMode  = "delta.columnMapping.mode"
	PropDeletionVectors    = "delta.enableDeletionVectors"
	PropTypeWidening       = "delta.enableTypeWidening"
	PropMinReaderVersion   = "delta.minReaderVersion"
	PropMinWriterVersion   = "delta.minWriterVersion"
	PropFeatureTimestampNT = "delta.feature.timestampNtz"
)

// IcebergReads reports whether the table has Iceberg reads (UniForm) on:
// 'delta.universalFormat.enabledFormats' lists iceberg.
func (t Table) IcebergReads() bool {
	for _, f := range strings.Split(prop(t.Properties, PropEnabledFormats), ",") {
		if strings.EqualFold(strings.TrimSpace(f), "iceberg") {
			return true
		}
	}
	return false
}

// prop looks a property up. Keys under "delta." are case-insensitive in
// Delta, so they are matched ignoring case.
func prop(props map[string]string, key string) string {
	if v, ok := props[key]; ok {
		return v
	}
	if strings.HasPrefix(strings.ToLower(key), "delta.") {
		for k, v := range props {
			if strings.EqualFold(k, key) {
				return v
			}
		}
	}
	return ""
}

// PropertyTrue reports whether the table property key is "true" (delta.*
// keys matched ignoring case, as Delta does).
func (t Table) PropertyTrue(key string) bool { return propTrue(t.Properties, key) }

func propTrue(props map[string]string, key string) bool {
	return strings.EqualFold(strings.TrimSpace(prop(props, key)), "true")
}

// setProp stores key, replacing a differently-cased spelling of a delta.* key.
func setProp(props map[string]string, key, value string) {
	if strings.HasPrefix(strings.ToLower(key), "delta.") {
		for k := range props {
			if strings.EqualFold(k, key) && k != key {
				delete(props, k)
			}
		}
	}
	props[key] = value
}

func hasProp(props map[string]string, key string) bool {
	if _, ok := props[key]; ok {
		return true
	}
	for k := range props {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// applyTableFeatures enforces the property side effects Databricks applies at
// CREATE and on every property change:
//   - Iceberg reads (UniForm) turn column mapping on ('name') when unset;
//   - a TIMESTAMP_NTZ column enables the timestampNtz table feature;
//   - delta.minReaderVersion / delta.minWriterVersion are raised to what the
//     enabled features need (1/2 without features, 2/5 for column mapping
//     alone, 3/7 for table features such as deletion vectors); they are never
//     lowered, as Delta forbids protocol downgrades.
func applyTableFeatures(t *Table) {
	if t.IcebergReads() && !hasProp(t.Properties, PropColumnMappingMode) {
		setProp(t.Properties, PropColumnMappingMode, "name")
	}
	ntz := false
	for _, c := range t.Columns {
		if c.Type.Contains(typemap.TimestampNTZ) {
			ntz = true
		}
	}
	if ntz && !featureSupported(t.Properties, PropFeatureTimestampNT) {
		setProp(t.Properties, PropFeatureTimestampNT, "supported")
	}

	reader, writer := 1, 2
	mapping := strings.ToLower(prop(t.Properties, PropColumnMappingMode))
	if mapping == "name" || mapping == "id" {
		reader, writer = 2, 5
	}
	tableFeatures := propTrue(t.Properties, PropDeletionVectors) || propTrue(t.Properties, PropIcebergCompatV2) ||
		propTrue(t.Properties, PropTypeWidening) || t.IcebergReads()
	for k := range t.Properties {
		if strings.HasPrefix(strings.ToLower(k), "delta.feature.") {
			tableFeatures = true
		}
	}
	for _, c := range t.Columns {
		if c.Type.Contains(typemap.Variant) {
			tableFeatures = true
		}
	}
	if tableFeatures {
		reader, writer = 3, 7
	}
	if cur, err := strconv.Atoi(prop(t.Properties, PropMinReaderVersion)); err == nil && cur > reader {
		reader = cur
	}
	if cur, err := strconv.Atoi(prop(t.Properties, PropMinWriterVersion)); err == nil && cur > writer {
		writer = cur
	}
	setProp(t.Properties, PropMinReaderVersion, strconv.Itoa(reader))
	setProp(t.Properties, PropMinWriterVersion, strconv.Itoa(writer))
}

func featureSupported(props map[string]string, key string) bool {
	v := strings.ToLower(prop(props, key))
	return v == "supported" || v == "enabled"
}

// icebergLegal reports whether a type can be read through Iceberg V2.
func icebergLegal(t typemap.Type) bool {
	return !t.Contains(typemap.Variant)
}

// invalidColumnChars are the characters Delta refuses in column names unless
// column mapping is on.
const invalidColumnChars = " ,;{}()\n\t="

func checkColumns(t *Table, cols []typemap.Column) *sqlError {
	mapping := strings.ToLower(prop(t.Properties, PropColumnMappingMode))
	for _, c := range cols {
		if c.Name == "" {
			return parseErr("empty column name")
		}
		if mapping != "name" && mapping != "id" && strings.ContainsAny(c.Name, invalidColumnChars) {
			return &sqlError{Class: "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES", SQLState: "42K05", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("Found invalid character(s) among ' ,;{}()\\n\\t=' in the column name %s. Please enable column mapping ('delta.columnMapping.mode'='name') to use these characters.", typemap.QuoteIdent(c.Name))}
		}
		if t.IcebergReads() && !icebergLegal(c.Type) {
			return &sqlError{Class: "DELTA_ICEBERG_COMPAT_VIOLATION.UNSUPPORTED_DATA_TYPE", SQLState: "KD00E", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("column %s has type %s, which Iceberg reads (UniForm) do not support", typemap.QuoteIdent(c.Name), c.Type.Text())}
		}
	}
	return nil
}

// resolveName completes a one- or two-part name with the request's catalog
// and schema and lower-cases it.
func resolveName(ref tableRef, catalog, schema string) (string, *sqlError) {
	parts := []string(ref)
	switch len(parts) {
	case 1:
		if catalog == "" || schema == "" {
			return "", &sqlError{Class: "TABLE_OR_VIEW_NOT_FOUND", SQLState: "42P01", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("The table or view %s cannot be found: give catalog.schema.table or set the request's catalog and schema.", quoteRef(ref))}
		}
		parts = []string{catalog, schema, parts[0]}
	case 2:
		if catalog == "" {
			return "", &sqlError{Class: "TABLE_OR_VIEW_NOT_FOUND", SQLState: "42P01", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("The table or view %s cannot be found: give catalog.schema.table or set the request's catalog.", quoteRef(ref))}
		}
		parts = []string{catalog, parts[0], parts[1]}
	}
	for _, p := range parts {
		if !validUCName(p) {
			return "", &sqlError{Class: "INVALID_SCHEMA_OR_RELATION_NAME", SQLState: "42602", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("%s is not a valid name: Unity Catalog names may not contain '.', '/', spaces or control characters, nor exceed 255 characters.", typemap.QuoteIdent(p))}
		}
	}
	return NormalizeName(strings.Join(parts, ".")), nil
}

// validUCName applies Unity Catalog's rules for catalog, schema and table
// names: at most 255 characters, none of '.', ' ', '/', ASCII control
// characters or DEL.
func validUCName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == ' ' || c == '/' || c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

func notFound(name string) *sqlError {
	return &sqlError{Class: "TABLE_OR_VIEW_NOT_FOUND", SQLState: "42P01", Code: "BAD_REQUEST",
		Msg: fmt.Sprintf("The table or view %s cannot be found.", name)}
}

func alreadyExists(name string) *sqlError {
	return &sqlError{Class: "TABLE_OR_VIEW_ALREADY_EXISTS", SQLState: "42P07", Code: "ALREADY_EXISTS",
		Msg: fmt.Sprintf("Cannot create table or view %s because it already exists.", name)}
}

func columnNotFound(col, table string) *sqlError {
	return &sqlError{Class: "UNRESOLVED_COLUMN.WITH_SUGGESTION", SQLState: "42703", Code: "BAD_REQUEST",
		Msg: fmt.Sprintf("A column with name %s cannot be resolved in table %s.", typemap.QuoteIdent(col), table)}
}

// execute runs a parsed statement against the registry, completing partial
// table names with the request's catalog and schema. A nil result means the
// statement SUCCEEDED.
func (w *Workspace) execute(st *statement, catalog, schema string) *sqlError {
	name, serr := resolveName(st.Table, catalog, schema)
	if serr != nil {
		return serr
	}
	switch st.Kind {
	case KindCreateTable:
		if w.isView(name) {
			if st.IfNotExists {
				return nil
			}
			return alreadyExists(name)
		}
		return w.create(name, st)
	case KindDropTable:
		if w.isView(name) {
			return wrongCommand("DROP TABLE", name, "VIEW", "DROP VIEW")
		}
		return w.drop(name, st)
	case KindCreateView:
		return w.createView(name, st, catalog, schema)
	case KindAlterViewAs:
		return w.alterView(name, st, catalog, schema)
	case KindDropView:
		return w.dropView(name, st)
	}
	if w.isView(name) {
		if st.Kind == KindCommentOnTable {
			// The service takes a view here ("COMMENT ON": "TABLE
			// relation_name", Databricks SQL reference), so refusing it as
			// EXPECT_TABLE_NOT_VIEW would be a claim the service does not
			// make; the emulator keeps no comment on its views.
			return unsupported("COMMENT ON TABLE of the view %s (the emulator keeps no comment on a view)", name)
		}
		return expectTableNotView(name, string(st.Kind))
	}
	before, ok := w.reg.Get(name)
	if !ok {
		return notFound(name)
	}
	if st.Kind == KindRepairSyncMetadata {
		w.forceIceberg(name)
		return nil
	}
	after, err := w.reg.Update(name, func(t *Table) error {
		if serr := alter(t, st); serr != nil {
			return serr
		}
		return nil
	})
	if err != nil {
		var serr *sqlError
		if errors.As(err, &serr) {
			return serr
		}
		if errors.Is(err, ErrNotFound) {
			return notFound(name)
		}
		return &sqlError{Class: "INTERNAL_ERROR", SQLState: "XX000", Code: "INTERNAL_ERROR", Msg: err.Error()}
	}
	if after.Version != before.Version {
		w.noteCommit(name)
	}
	return nil
}

func (w *Workspace) create(name string, st *statement) *sqlError {
	if _, ok := w.reg.Get(name); ok {
		if st.IfNotExists {
			return nil
		}
		return alreadyExists(name)
	}
	t := Table{FullName: name, TableType: "MANAGED", Columns: st.Columns, Properties: map[string]string{},
		Tags: map[string]string{}, Owner: w.opts.Owner}
	if st.Comment != nil {
		t.Comment = *st.Comment
	}
	for _, p := range st.Properties {
		setProp(t.Properties, p.Key, p.Value)
	}
	t = WithCreateDefaults(t)
	seen := map[string]bool{}
	for _, c := range t.Columns {
		if seen[strings.ToLower(c.Name)] {
			return &sqlError{Class: "COLUMN_ALREADY_EXISTS", SQLState: "42711", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("The column %s already exists.", typemap.QuoteIdent(c.Name))}
		}
		seen[strings.ToLower(c.Name)] = true
	}
	if serr := checkColumns(&t, t.Columns); serr != nil {
		return serr
	}
	if _, err := w.reg.Create(t); err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			if st.IfNotExists {
				return nil
			}
			return alreadyExists(name)
		}
		return &sqlError{Class: "INTERNAL_ERROR", SQLState: "XX000", Code: "INTERNAL_ERROR", Msg: err.Error()}
	}
	w.noteCreate(name)
	return nil
}

// drop runs DROP TABLE [IF EXISTS]. A missing table is TABLE_OR_VIEW_NOT_FOUND
// unless IF EXISTS ("If specified, no TABLE_OR_VIEW_NOT_FOUND error is thrown
// when the table does not exist", Databricks SQL reference, DROP TABLE).
// The table's grants go with it: Unity Catalog keeps a table's privileges
// with the dropped table, under its id, and restores them only when that
// table is undropped ("Table metadata – such as table privileges, column
// spec, and properties – will be recovered", UNDROP TABLE), so a table
// created again under the name starts with none.
func (w *Workspace) drop(name string, st *statement) *sqlError {
	if _, err := w.Drop(name); err != nil {
		if errors.Is(err, ErrNotFound) {
			if st.IfExists {
				return nil
			}
			return notFound(name)
		}
		return &sqlError{Class: "INTERNAL_ERROR", SQLState: "XX000", Code: "INTERNAL_ERROR", Msg: err.Error()}
	}
	return nil
}

// WithCreateDefaults returns t with the properties a Databricks workspace
// gives a table at CREATE: 'delta.enableDeletionVectors'='true' unless t sets
// it (workspaces commonly auto-enable deletion vectors), column mapping
// 'name' with Iceberg reads, the timestampNtz feature for TIMESTAMP_NTZ
// columns, and delta.minReaderVersion / delta.minWriterVersion. SQL CREATE
// TABLE applies it; the emulator core should apply it to tables it seeds
// into the Registry directly so that they look the same.
func WithCreateDefaults(t Table) Table {
	t = t.Clone()
	if !hasProp(t.Properties, PropDeletionVectors) {
		t.Properties[PropDeletionVectors] = "true"
	}
	applyTableFeatures(&t)
	return t
}

// alter applies an ALTER / COMMENT ON statement to t.
func alter(t *Table, st *statement) *sqlError {
	switch st.Kind {
	case KindAddColumns:
		for i, c := range st.Columns {
			if _, idx := t.Column(c.Name); idx >= 0 {
				return &sqlError{Class: "FIELDS_ALREADY_EXISTS", SQLState: "42710", Code: "BAD_REQUEST",
					Msg: fmt.Sprintf("Cannot add column, because %s already exists in %s.", typemap.QuoteIdent(c.Name), t.FullName)}
			}
			for _, d := range st.Columns[:i] {
				if strings.EqualFold(d.Name, c.Name) {
					return &sqlError{Class: "COLUMN_ALREADY_EXISTS", SQLState: "42711", Code: "BAD_REQUEST",
						Msg: fmt.Sprintf("The column %s already exists.", typemap.QuoteIdent(c.Name))}
				}
			}
			if !c.Nullable {
				return &sqlError{Class: "DELTA_NOT_NULL_CONSTRAINT_VIOLATED", SQLState: "0A000", Code: "BAD_REQUEST",
					Msg: fmt.Sprintf("Cannot add column %s with NOT NULL: existing rows would hold NULL in it.", typemap.QuoteIdent(c.Name))}
			}
			if c.Type.Contains(typemap.TimestampNTZ) && !featureSupported(t.Properties, PropFeatureTimestampNT) {
				return &sqlError{Class: "DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT", SQLState: "0AKDE", Code: "BAD_REQUEST",
					Msg: fmt.Sprintf("Your table schema requires manual enablement of the following table feature(s): timestampNtz (column %s). To do this, run ALTER TABLE %s SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported') first.", typemap.QuoteIdent(c.Name), t.FullName)}
			}
		}
		if serr := checkColumns(t, st.Columns); serr != nil {
			return serr
		}
		t.Columns = append(t.Columns, st.Columns...)
		applyTableFeatures(t)
	case KindAlterColumnType:
		c, idx := t.Column(st.Column)
		if idx < 0 {
			return columnNotFound(st.Column, t.FullName)
		}
		if c.Type.Equal(st.NewType) {
			return nil
		}
		iceberg := t.IcebergReads()
		if !propTrue(t.Properties, PropTypeWidening) {
			return &sqlError{Class: "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP", SQLState: "0AKDC", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("ALTER TABLE ALTER COLUMN is not supported for changing column %s from %s to %s: type widening is off (set 'delta.enableTypeWidening'='true').", typemap.QuoteIdent(c.Name), c.Type.Text(), st.NewType.Text())}
		}
		if !typemap.CanWiden(c.Type, st.NewType, iceberg) {
			why := "it is not a supported type widening"
			if iceberg && typemap.CanWiden(c.Type, st.NewType, false) {
				why = "Iceberg reads (UniForm) are on and Iceberg V2 allows only int->bigint, float->double and decimal precision increases at the same scale"
			}
			return &sqlError{Class: "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP", SQLState: "0AKDC", Code: "BAD_REQUEST",
				Msg: fmt.Sprintf("ALTER TABLE ALTER COLUMN is not supported for changing column %s from %s to %s: %s.", typemap.QuoteIdent(c.Name), c.Type.Text(), st.NewType.Text(), why)}
		}
		t.Columns[idx].Type = st.NewType
		applyTableFeatures(t)
	case KindAlterColumnComment:
		_, idx := t.Column(st.Column)
		if idx < 0 {
			return columnNotFound(st.Column, t.FullName)
		}
		t.Columns[idx].Comment = *st.Comment
	case KindDropNotNull:
		_, idx := t.Column(st.Column)
		if idx < 0 {
			return columnNotFound(st.Column, t.FullName)
		}
		t.Columns[idx].Nullable = true
	case KindSetProperties:
		if serr := checkProtocolDowngrade(t, st.Properties); serr != nil {
			return serr
		}
		for _, p := range st.Properties {
			setProp(t.Properties, p.Key, p.Value)
		}
		applyTableFeatures(t)
		if serr := checkColumns(t, t.Columns); serr != nil {
			return serr
		}
	case KindSetTags:
		for _, p := range st.Properties {
			t.Tags[p.Key] = p.Value
		}
	case KindCommentOnTable:
		t.Comment = *st.Comment
	default:
		return unsupported("%s", st.Kind)
	}
	return nil
}

// checkProtocolDowngrade refuses setting delta.minReaderVersion or
// delta.minWriterVersion below the table's current value, as Delta does:
// protocol upgrades are irreversible ("Protocol version upgrades are
// irreversible", https://docs.delta.io/latest/versioning.html; the error
// class DELTA_INVALID_PROTOCOL_DOWNGRADE, "Protocol version cannot be
// downgraded from <old> to <new>", in the Delta error classes,
// https://docs.databricks.com/en/error-messages/error-classes.html). Setting
// the current value again is a no-op and allowed.
func checkProtocolDowngrade(t *Table, props []property) *sqlError {
	for _, p := range props {
		if !strings.EqualFold(p.Key, PropMinReaderVersion) && !strings.EqualFold(p.Key, PropMinWriterVersion) {
			continue
		}
		cur, err1 := strconv.Atoi(prop(t.Properties, p.Key))
		want, err2 := strconv.Atoi(p.Value)
		if err1 != nil || err2 != nil || want >= cur {
			continue
		}
		return &sqlError{Class: "DELTA_INVALID_PROTOCOL_DOWNGRADE", SQLState: "KD004", Code: "BAD_REQUEST",
			Msg: fmt.Sprintf("Protocol version cannot be downgraded from %s=%d to %d.", p.Key, cur, want)}
	}
	return nil
}
