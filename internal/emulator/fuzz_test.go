package emulator

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/variant"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// fuzzColumns is the table the DoPut fuzz target writes: every kind of
// column the emulator decodes, converts or walks (NOT NULL, strings,
// decimals, timestamps, nested types, VARIANT at the top and nested).
const fuzzColumns = "id BIGINT NOT NULL, s STRING, b BINARY, d DECIMAL(10,2), big DECIMAL(38,6), ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, " +
	"f FLOAT, x DOUBLE, ok BOOLEAN, t TINYINT, tags ARRAY<STRING>, m MAP<STRING, BIGINT>, st STRUCT<a: INT NOT NULL, v: VARIANT>, v VARIANT, lv ARRAY<VARIANT>"

// frameStream is a DoPut stream of fixed frames.
type frameStream struct {
	frames []*flight.FlightData
	seen   bool // the schema frame was returned
}

func (s *frameStream) Recv() (*flight.FlightData, error) {
	if len(s.frames) == 0 {
		return nil, io.EOF
	}
	f := s.frames[0]
	s.frames = s.frames[1:]
	if s.seen {
		// What schemaCapture.Recv checks of every frame after the schema.
		if err := checkDecompressedSize(f); err != nil {
			return nil, err
		}
	}
	s.seen = true
	return f, nil
}

// admitFrames runs frames, after schemaFrame, through what DoPut does with
// a record batch frame before its ack: the Flight reader, the schema check,
// validateBatch, the NOT NULL and nested checks, the storage conversion and
// the Parquet encoding of the table store (recvLoop, tableStore.commit). An
// error is a refusal; a panic is a bug.
func admitFrames(cols []typemap.Column, schemaFrame []byte, frames ...*flight.FlightData) error {
	all := append([]*flight.FlightData{{DataHeader: schemaFrame}}, frames...)
	rdr, err := flight.NewRecordReader(&frameStream{frames: all})
	if err != nil {
		return err
	}
	defer rdr.Release()
	names, err := readFieldNames(schemaFrame)
	if err != nil {
		return err
	}
	probs, err := checkSchema(cols, rdr.Schema(), names)
	if err != nil {
		return err
	}
	if len(probs) > 0 {
		return errors.New("schema refused")
	}
	conv := newStorageConverter(cols, rdr.Schema())
	for rdr.Next() {
		rec := rdr.RecordBatch()
		if rec.NumRows() == 0 {
			continue
		}
		if err := validateBatch(rec); err != nil {
			continue
		}
		if err := conv.checkNulls(rec); err != nil {
			continue
		}
		if err := conv.checkNested(rec); err != nil {
			continue
		}
		stored, err := conv.convert(rec)
		if err != nil {
			continue
		}
		_, err = encodeParquetWith(stored.Schema(), []arrow.RecordBatch{stored}, compress.Codecs.Uncompressed)
		stored.Release()
		if err != nil {
			return err
		}
	}
	return rdr.Err()
}

// fuzzFrames is the schema frame of fuzzColumns, as the product writes it,
// and a record batch frame of rows in each body compression.
func fuzzFrames(tb testing.TB) (cols []typemap.Column, schemaFrame []byte, frames []*flight.FlightData) {
	tb.Helper()
	cols, err := typemap.ParseColumns(fuzzColumns)
	if err != nil {
		tb.Fatal(err)
	}
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	res, err := conv.ConvertJSON([][]byte{
		[]byte(`{"id":1,"s":"ab","b":"AQI=","d":"12.34","big":"1.5","ts":1700000000000000,"ntz":"2026-01-02T03:04:05","day":"2026-01-02","f":1.5,"x":2.5,"ok":true,"t":7,"tags":["a","b"],"m":{"k":1},"st":{"a":1,"v":{"z":[1,"y"]}},"v":{"q":null},"lv":[1,"two"]}`),
		[]byte(`{"id":2}`),
		[]byte(`{"id":3,"s":"","tags":[],"m":{},"st":null,"lv":[null]}`),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.RowErrors) > 0 {
		tb.Fatalf("seed rows: %v", res.RowErrors)
	}
	rec := res.Record
	defer rec.Release()
	// Maps named entries{keys, values}, as the service builds them (see
	// sendOne).
	schemaFrame = renameMapChildren(tb, schemaMeta(rec.Schema()), [3]string{"entries", "keys", "values"})
	for _, opts := range [][]ipc.Option{nil, {ipc.WithLZ4()}, {ipc.WithZstd()}} {
		pl, err := ipc.GetRecordBatchPayload(rec, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		var body bytes.Buffer
		if err := pl.SerializeBody(&body); err != nil {
			tb.Fatal(err)
		}
		frames = append(frames, &flight.FlightData{DataHeader: bytes.Clone(pl.Meta().Bytes()), DataBody: body.Bytes()})
		pl.Release()
	}
	return cols, schemaFrame, frames
}

// TestFuzzSeedsAreAdmitted: the seeds of FuzzDoPutFrame are good frames,
// so the fuzzer starts from batches that reach the store.
func TestFuzzSeedsAreAdmitted(t *testing.T) {
	cols, schemaFrame, frames := fuzzFrames(t)
	for i, f := range frames {
		if err := admitFrames(cols, schemaFrame, f); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
	}
}

// FuzzDoPutFrame feeds a corrupted record batch frame (IPC header and
// body: offsets, lengths, buffer sizes, null counts, compression, variant
// bytes) to the DoPut path after a valid schema frame, optionally preceded
// by a corrupted dictionary batch frame (dictionary ids). Nothing a client
// sends may panic the emulator: every frame is refused or stored. Seeds:
// testdata/fuzz/FuzzDoPutFrame and the frames of fuzzFrames.
func FuzzDoPutFrame(f *testing.F) {
	cols, schemaFrame, frames := fuzzFrames(f)
	for _, fr := range frames {
		f.Add(fr.DataHeader, fr.DataBody, []byte(nil), []byte(nil))
		// The same frame announced as a dictionary batch first.
		f.Add(fr.DataHeader, fr.DataBody, fr.DataHeader, fr.DataBody)
	}
	f.Fuzz(func(t *testing.T, header, body, dictHeader, dictBody []byte) {
		var fs []*flight.FlightData
		if len(dictHeader) > 0 {
			fs = append(fs, &flight.FlightData{DataHeader: dictHeader, DataBody: dictBody})
		}
		fs = append(fs, &flight.FlightData{DataHeader: header, DataBody: body})
		_ = admitFrames(cols, schemaFrame, fs...)
	})
}

// FuzzJSONRecords feeds a JSON record (the ephemeral stream's JSON path)
// through jsonRecords, the storage conversion and the Parquet encoding of
// fuzzColumns: any JSON, any nesting, any number, refused or stored, never a
// panic.
func FuzzJSONRecords(f *testing.F) {
	cols, err := typemap.ParseColumns(fuzzColumns)
	if err != nil {
		f.Fatal(err)
	}
	schema, err := serviceSchema(cols)
	if err != nil {
		f.Fatal(err)
	}
	conv := newStorageConverter(cols, schema)
	for _, seed := range []string{
		`{"id":1,"s":"ab","b":"AQI=","d":"12.34","big":"1.5","ts":"2026-01-02T03:04:05Z","ntz":"2026-01-02T03:04:05","day":"2026-01-02","f":1.5,"x":2.5,"ok":true,"t":7,"tags":["a","b"],"m":{"k":1},"st":{"a":1,"v":{"z":[1,"y"]}},"v":{"q":null},"lv":[1,"two"]}`,
		`{"id":2}`,
		`{"id":3,"v":[[[[[[[[[[1]]]]]]]]]]}`,
		`{"id":1e400}`,
		`{"id":1,"d":"99999999999"}`,
		`{"id":1,"m":{"":null}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, record string) {
		rec, err := jsonRecords(cols, schema, []string{record})
		if err != nil {
			return
		}
		defer rec.Release()
		if err := validateBatch(rec); err != nil {
			t.Fatalf("jsonRecords built an invalid batch from %q: %v", record, err)
		}
		stored, err := conv.convert(rec)
		if err != nil {
			return
		}
		defer stored.Release()
		if _, err := encodeParquetWith(stored.Schema(), []arrow.RecordBatch{stored}, compress.Codecs.Uncompressed); err != nil {
			t.Fatalf("a stored batch of %q does not encode: %v", record, err)
		}
	})
}

// FuzzVariantJSON decodes arbitrary variant bytes (metadata, value) the way
// the emulator checks and reads back a VARIANT a client sent (variantJSON):
// refused or decoded, never a panic, however deep.
func FuzzVariantJSON(f *testing.F) {
	for _, doc := range []string{`{"a":[1,"x",null,true]}`, `1.5`, `"s"`, `[[[[[[[[1]]]]]]]]`, `{"k":{"k":{"k":{}}}}`} {
		val, err := variant.ParseJSON(doc, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(val.Metadata().Bytes(), val.Bytes())
	}
	f.Fuzz(func(t *testing.T, meta, val []byte) {
		b := array.NewStructBuilder(memory.DefaultAllocator, typemap.VariantArrowType())
		defer b.Release()
		b.Append(true)
		b.FieldBuilder(0).(*array.BinaryBuilder).Append(meta)
		b.FieldBuilder(1).(*array.BinaryBuilder).Append(val)
		st := b.NewStructArray()
		defer st.Release()
		_, _ = variantJSON(st, 0)
	})
}
