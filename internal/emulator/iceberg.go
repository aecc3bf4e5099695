package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Iceberg metadata over the Delta table (UniForm).
//
// Databricks generates Iceberg metadata for a table with Iceberg reads
// asynchronously after each Delta commit, over the same Parquet files
// ("Read Delta tables with Iceberg clients": UniForm "generates Iceberg
// metadata asynchronously ... without rewriting data"); Unity Catalog reports
// how far it got as delta_uniform_iceberg.converted_delta_version. The
// emulator models that lag in package workspace and writes the metadata when
// a converted version is first asked for (by the Iceberg REST catalog): for
// each data commit up to the converted version one Iceberg snapshot (format
// v2, operation append) whose manifest lists the Parquet files the commit
// added, a manifest list per snapshot naming the manifests of every commit
// so far, and a metadata JSON per converted version at the metadata_location
// UC reports (<location>/metadata/<version:05d>-<table_id>.metadata.json).
// Manifests and manifest lists are written with iceberg-go's own writers;
// each file is written once, atomically, and never changed.
//
// The schema is the table's current UC schema with the field ids of
// fieldids.go; files written before field ids existed are read through the
// name mapping the metadata carries (schema.name-mapping.default, Iceberg
// spec "Column Projection").

// errNotConverted reports a table whose first version has not been
// converted yet: there is no Iceberg metadata to serve.
var errNotConverted = errors.New("iceberg metadata has not been generated for this table yet")

// icebergView is the Iceberg view of a table at its converted version.
type icebergView struct {
	metadataLocation string
	metadata         table.Metadata
	raw              []byte // the metadata JSON as written
	convertedVersion int64
}

// icebergSchema is the Iceberg schema of a table's columns with the ids of
// fieldids.go. Types follow Delta's UniForm mapping: BYTE and SHORT read as
// int, TIMESTAMP as timestamptz, TIMESTAMP_NTZ as timestamp.
func icebergSchema(cols []typemap.Column) (*iceberg.Schema, error) {
	ids := columnFieldIDs(cols)
	fields := make([]iceberg.NestedField, len(cols))
	for i, c := range cols {
		n := ids[c.Name]
		t, err := icebergType(c.Type, n)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		fields[i] = iceberg.NestedField{ID: n.id, Name: c.Name, Type: t, Required: !c.Nullable, Doc: c.Comment}
	}
	return iceberg.NewSchema(0, fields...), nil
}

func icebergType(t typemap.Type, n *idNode) (iceberg.Type, error) {
	switch t.Kind {
	case typemap.Boolean:
		return iceberg.PrimitiveTypes.Bool, nil
	case typemap.Byte, typemap.Short, typemap.Int:
		return iceberg.PrimitiveTypes.Int32, nil
	case typemap.Long:
		return iceberg.PrimitiveTypes.Int64, nil
	case typemap.Float:
		return iceberg.PrimitiveTypes.Float32, nil
	case typemap.Double:
		return iceberg.PrimitiveTypes.Float64, nil
	case typemap.Decimal:
		return iceberg.DecimalTypeOf(t.Precision, t.Scale), nil
	case typemap.String:
		return iceberg.PrimitiveTypes.String, nil
	case typemap.Binary:
		return iceberg.PrimitiveTypes.Binary, nil
	case typemap.Date:
		return iceberg.PrimitiveTypes.Date, nil
	case typemap.Timestamp:
		return iceberg.PrimitiveTypes.TimestampTz, nil
	case typemap.TimestampNTZ:
		return iceberg.PrimitiveTypes.Timestamp, nil
	case typemap.Array:
		en := n.children["element"]
		et, err := icebergType(*t.Elem, en)
		if err != nil {
			return nil, err
		}
		return &iceberg.ListType{ElementID: en.id, Element: et}, nil
	case typemap.Map:
		kn, vn := n.children["key"], n.children["value"]
		kt, err := icebergType(*t.Key, kn)
		if err != nil {
			return nil, err
		}
		vt, err := icebergType(*t.Value, vn)
		if err != nil {
			return nil, err
		}
		return &iceberg.MapType{KeyID: kn.id, KeyType: kt, ValueID: vn.id, ValueType: vt}, nil
	case typemap.Struct:
		fields := make([]iceberg.NestedField, len(t.Fields))
		for i, f := range t.Fields {
			fn := n.children[f.Name]
			ft, err := icebergType(f.Type, fn)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			fields[i] = iceberg.NestedField{ID: fn.id, Name: f.Name, Type: ft, Required: !f.Nullable, Doc: f.Comment}
		}
		return &iceberg.StructType{FieldList: fields}, nil
	}
	// VARIANT: Iceberg v2 has no such type, and a table with Iceberg reads
	// cannot have one (DELTA_ICEBERG_COMPAT_VIOLATION at DDL).
	return nil, fmt.Errorf("type %s has no Iceberg v2 equivalent", t.Text())
}

// icebergTableOf returns the Iceberg view of t at its converted Delta
// version, writing whatever metadata files that version still lacks.
func (s *Server) icebergTableOf(t workspace.Table) (*icebergView, error) {
	ts, err := s.existingStore(t.FullName)
	if err != nil {
		return nil, err
	}
	// Under icebergMu no data commit is half published: every commit the
	// converted version counts is in dataLog.
	ts.icebergMu.Lock()
	defer ts.icebergMu.Unlock()
	converted, _, ok := s.ws.IcebergConverted(t.FullName)
	if !ok {
		return nil, errNotConverted
	}
	ts.mu.Lock()
	var commits []dataCommit
	for _, c := range ts.dataLog {
		if c.version > converted {
			break
		}
		commits = append(commits, c)
	}
	ts.mu.Unlock()

	schema, err := icebergSchema(t.Columns)
	if err != nil {
		return nil, fmt.Errorf("iceberg schema of %s: %w", t.FullName, err)
	}
	loc := tableLocation(t)
	metaDir := filepath.Join(ts.dir, "metadata")
	if err := os.MkdirAll(metaDir, 0o755); err != nil {
		return nil, fmt.Errorf("create iceberg metadata dir: %w", err)
	}

	tableUUID, err := uuid.Parse(t.TableID)
	if err != nil {
		return nil, fmt.Errorf("table id %q of %s is not a uuid: %w", t.TableID, t.FullName, err)
	}
	nameMapping, err := json.Marshal(schema.NameMapping())
	if err != nil {
		return nil, fmt.Errorf("name mapping of %s: %w", t.FullName, err)
	}
	b, err := table.NewMetadataBuilder(2)
	if err != nil {
		return nil, err
	}
	steps := []error{
		b.SetUUID(tableUUID),
		b.SetLoc(loc),
		b.AddSchema(schema),
		b.SetCurrentSchemaID(-1),
		b.AddPartitionSpec(iceberg.UnpartitionedSpec, true),
		b.SetDefaultSpecID(-1),
		b.AddSortOrder(&table.UnsortedSortOrder),
		b.SetDefaultSortOrderID(-1),
		b.SetProperties(iceberg.Properties{
			table.DefaultNameMappingKey: string(nameMapping),
			"converted-delta-version":   strconv.FormatInt(converted, 10),
		}),
	}
	if err := errors.Join(steps...); err != nil {
		return nil, fmt.Errorf("iceberg metadata of %s: %w", t.FullName, err)
	}

	var (
		manifests  []iceberg.ManifestFile
		parent     *int64
		totalRows  int64
		totalFiles int
	)
	for i, c := range commits {
		snapID, seq := int64(i+1), int64(i+1)
		mf, err := writeManifest(metaDir, loc, schema, snapID, seq, c)
		if err != nil {
			return nil, fmt.Errorf("iceberg manifest of %s snapshot %d: %w", t.FullName, snapID, err)
		}
		manifests = append(manifests, mf)
		listName := fmt.Sprintf("snap-%d-%s.avro", snapID, t.TableID)
		if err := writeOnce(filepath.Join(metaDir, listName), func(buf *bytes.Buffer) error {
			return iceberg.WriteManifestList(2, buf, snapID, parent, &seq, 0, manifests)
		}); err != nil {
			return nil, fmt.Errorf("iceberg manifest list of %s snapshot %d: %w", t.FullName, snapID, err)
		}
		var added int64
		for _, f := range c.files {
			added += f.rows
		}
		totalRows += added
		totalFiles += len(c.files)
		schemaID := schema.ID
		snap := &table.Snapshot{
			SnapshotID: snapID, ParentSnapshotID: parent, SequenceNumber: seq,
			TimestampMs: c.at.UnixMilli(), ManifestList: loc + "/metadata/" + listName, SchemaID: &schemaID,
			Summary: &table.Summary{Operation: table.OpAppend, Properties: iceberg.Properties{
				"added-data-files": strconv.Itoa(len(c.files)),
				"added-records":    strconv.FormatInt(added, 10),
				"total-data-files": strconv.Itoa(totalFiles),
				"total-records":    strconv.FormatInt(totalRows, 10),
			}},
		}
		if err := b.AddSnapshot(snap); err != nil {
			return nil, fmt.Errorf("iceberg snapshot %d of %s: %w", snapID, t.FullName, err)
		}
		id := snapID
		parent = &id
	}
	if parent != nil {
		if err := b.SetSnapshotRef(table.MainBranch, *parent, table.BranchRef); err != nil {
			return nil, fmt.Errorf("iceberg main branch of %s: %w", t.FullName, err)
		}
	}
	md, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("iceberg metadata of %s: %w", t.FullName, err)
	}
	raw, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("encode iceberg metadata of %s: %w", t.FullName, err)
	}
	name := fmt.Sprintf("%05d-%s.metadata.json", converted, t.TableID)
	if err := writeOnce(filepath.Join(metaDir, name), func(buf *bytes.Buffer) error {
		_, err := buf.Write(raw)
		return err
	}); err != nil {
		return nil, fmt.Errorf("write iceberg metadata of %s: %w", t.FullName, err)
	}
	// What is on disk is what readers get, also when an earlier call wrote it.
	raw, err = os.ReadFile(filepath.Join(metaDir, name))
	if err != nil {
		return nil, fmt.Errorf("read iceberg metadata of %s: %w", t.FullName, err)
	}
	md, err = table.ParseMetadataBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("parse iceberg metadata of %s: %w", t.FullName, err)
	}
	return &icebergView{metadataLocation: loc + "/metadata/" + name, metadata: md, raw: raw, convertedVersion: converted}, nil
}

// writeManifest writes (once) the manifest of one data commit: its files as
// ADDED entries of snapshot snapID, and returns its manifest-list entry.
func writeManifest(metaDir, loc string, schema *iceberg.Schema, snapID, seq int64, c dataCommit) (iceberg.ManifestFile, error) {
	name := fmt.Sprintf("manifest-%d-m0.avro", snapID)
	var rows int64
	for _, f := range c.files {
		rows += f.rows
	}
	err := writeOnce(filepath.Join(metaDir, name), func(buf *bytes.Buffer) error {
		entries := make([]iceberg.ManifestEntry, 0, len(c.files))
		for _, f := range c.files {
			df, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData,
				loc+"/"+f.path, iceberg.ParquetFile, nil, nil, nil, f.rows, f.size)
			if err != nil {
				return fmt.Errorf("data file %s: %w", f.path, err)
			}
			id := snapID
			entries = append(entries, iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &id, &seq, &seq, df.Build()))
		}
		_, err := iceberg.WriteManifest(loc+"/metadata/"+name, buf, 2, *iceberg.UnpartitionedSpec, schema, snapID, entries)
		return err
	})
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(filepath.Join(metaDir, name))
	if err != nil {
		return nil, err
	}
	return iceberg.NewManifestFile(2, loc+"/metadata/"+name, info.Size(), int32(iceberg.UnpartitionedSpec.ID()), snapID).
		SequenceNum(seq, seq).AddedFiles(int32(len(c.files))).AddedRows(rows).Build(), nil
}

// writeOnce writes path from fill unless it exists, through a temporary file
// renamed into place, so a reader never sees a partial file.
func writeOnce(path string, fill func(*bytes.Buffer) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := fill(&buf); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+workspace.RandomHex(8))
	if err := writeFileSync(tmp, buf.Bytes()); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("publish %s: %w", filepath.Base(path), err)
	}
	return nil
}
