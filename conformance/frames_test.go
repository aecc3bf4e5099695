package conformance

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// TestFramesMatchOfficialSDK sends the same Arrow batch through the official
// SDK and through our client to a recording server and compares what reaches
// the wire: the OAuth token request, the DoPut call metadata, the schema
// frame, and each batch frame's app_metadata and contents.
func TestFramesMatchOfficialSDK(t *testing.T) {
	for _, tc := range []struct{ name, sdk, ours string }{
		{"uncompressed", "", ""},
		{"zstd", "zstd", "zstd"},
		{"lz4_frame", "lz4", "lz4_frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batches := []arrow.RecordBatch{scenarioBatch(0, 1000), scenarioBatch(1000, 1000)}
			defer func() {
				for _, b := range batches {
					b.Release()
				}
			}()

			// The official SDK.
			sdkRec := startRecorder(t)
			ipcFile := filepath.Join(t.TempDir(), "batch.ipc")
			writeIPCFile(t, ipcFile, batches)
			res := runNode(t, time.Minute, "sdk_arrow.js", map[string]string{
				"endpoint": "http://" + sdkRec.grpcAddr, "workspace-url": sdkRec.httpURL,
				"client-id": confClientID, "client-secret": confSecret, "table": confTable,
				"ipc-file": ipcFile, "compression": tc.sdk,
			})
			if !res.OK {
				t.Fatalf("official SDK against the recorder: %s\n%s", res.Error, res.Stderr)
			}

			// Our client.
			ourRec := startRecorder(t)
			c, err := ingest.NewClient(ingest.Config{
				Endpoint: "http://" + ourRec.grpcAddr, WorkspaceURL: ourRec.httpURL,
				ClientID: confClientID, ClientSecret: confSecret, Compression: tc.ours,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := c.OpenArrowStream(ctx, confTable, scenarioSchema)
			if err != nil {
				t.Fatalf("our client against the recorder: %v", err)
			}
			for _, b := range batches {
				if _, err := s.Submit(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			compareTokenRequests(t, sdkRec, ourRec)
			compareDoPut(t, sdkRec.doPut(t), ourRec.doPut(t), batches, tc.ours != "")
		})
	}
}

func compareTokenRequests(t *testing.T, sdkRec, ourRec *recorder) {
	t.Helper()
	sdkToks, _ := sdkRec.snapshot()
	ourToks, _ := ourRec.snapshot()
	if len(sdkToks) != 1 || len(ourToks) != 1 {
		t.Fatalf("token requests: official SDK %d, ours %d; want one each", len(sdkToks), len(ourToks))
	}
	sdk, ours := sdkToks[0], ourToks[0]
	if sdk.ContentType != ours.ContentType {
		t.Errorf("token Content-Type: SDK %q, ours %q", sdk.ContentType, ours.ContentType)
	}
	if sdk.User != ours.User || sdk.Pass != ours.Pass || ours.User != confClientID {
		t.Errorf("token Basic credentials differ: SDK user %q, ours user %q (or passwords differ)", sdk.User, ours.User)
	}
	if keys(sdk.Form) != keys(ours.Form) {
		t.Errorf("token form fields: SDK [%s], ours [%s]", keys(sdk.Form), keys(ours.Form))
	}
	for _, f := range []string{"grant_type", "scope", "resource"} {
		if sdk.Form.Get(f) != ours.Form.Get(f) {
			t.Errorf("token form %s: SDK %q, ours %q", f, sdk.Form.Get(f), ours.Form.Get(f))
		}
	}
	if want := "api://databricks/workspaces/" + confWorkspaceID + "/zerobusDirectWriteApi"; ours.Form.Get("resource") != want {
		t.Errorf("our token resource %q, want %q", ours.Form.Get("resource"), want)
	}
	sdkDetails := canonicalDetails(t, sdk.Form.Get("authorization_details"))
	ourDetails := canonicalDetails(t, ours.Form.Get("authorization_details"))
	if !reflect.DeepEqual(sdkDetails, ourDetails) {
		t.Errorf("authorization_details differ:\n SDK  %v\n ours %v", sdkDetails, ourDetails)
	}
	if len(ourDetails) != 3 {
		t.Errorf("authorization_details has %d entries, want 3", len(ourDetails))
	}
}

// canonicalDetails parses authorization_details into order-insensitive form:
// each object re-encoded as JSON (keys sorted, string lists sorted), the list
// of objects sorted.
func canonicalDetails(t *testing.T, raw string) []string {
	t.Helper()
	var objs []map[string]any
	if err := json.Unmarshal([]byte(raw), &objs); err != nil {
		t.Fatalf("authorization_details %q: %v", raw, err)
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		for k, v := range o {
			if list, ok := v.([]any); ok {
				ss := make([]string, len(list))
				for i, x := range list {
					ss[i], _ = x.(string)
				}
				sort.Strings(ss)
				o[k] = ss
			}
		}
		b, _ := json.Marshal(o) // map keys are marshalled sorted
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

func keys[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// transportHeaders are set by the gRPC stacks themselves, not by the protocol.
var transportHeaders = map[string]bool{
	":authority": true, "content-type": true, "user-agent": true, "te": true,
	"grpc-accept-encoding": true, "grpc-encoding": true, "grpc-timeout": true,
}

func compareDoPut(t *testing.T, sdk, ours *recordedCall, want []arrow.RecordBatch, compressed bool) {
	t.Helper()
	protoKeys := func(c *recordedCall) string {
		m := map[string]bool{}
		for k := range c.MD {
			if !transportHeaders[k] {
				m[k] = true
			}
		}
		return keys(m)
	}
	t.Logf("metadata keys: SDK [%s] user-agent %q; ours [%s] user-agent %q",
		keys(sdk.MD), sdk.MD.Get("user-agent"), keys(ours.MD), ours.MD.Get("user-agent"))
	if protoKeys(sdk) != protoKeys(ours) {
		t.Errorf("call metadata keys: SDK [%s], ours [%s]", protoKeys(sdk), protoKeys(ours))
	}
	for _, c := range []struct {
		who string
		rc  *recordedCall
	}{{"official SDK", sdk}, {"ours", ours}} {
		md := c.rc.MD
		if got := md.Get("x-databricks-zerobus-table-name"); len(got) != 1 || got[0] != confTable {
			t.Errorf("%s: table header %v, want [%s]", c.who, got, confTable)
		}
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer recorded-token-1" {
			t.Errorf("%s: authorization header %v, want the issued bearer token", c.who, got)
		}
		if ua := md.Get("user-agent"); len(ua) == 0 || !strings.Contains(ua[0], "/") {
			t.Errorf("%s: user-agent %v, want product/version", c.who, ua)
		}
		checkFrames(t, c.who, c.rc.Frames, want)
	}
	if len(sdk.Frames) != len(ours.Frames) {
		t.Errorf("frame count: SDK %d, ours %d", len(sdk.Frames), len(ours.Frames))
	}
	if len(sdk.Frames) > 0 && len(ours.Frames) > 0 {
		ss, err1 := decodeSchema(sdk.Frames[0])
		os, err2 := decodeSchema(ours.Frames[0])
		if err1 != nil || err2 != nil {
			t.Fatalf("decode schema frames: SDK %v, ours %v", err1, err2)
		}
		if !ss.Equal(os) || !ss.Metadata().Equal(os.Metadata()) {
			t.Errorf("schema frames differ:\n SDK  %v\n ours %v", ss, os)
		}
		t.Logf("schema data_header: SDK %d bytes, ours %d bytes, byte-identical=%v",
			len(sdk.Frames[0].DataHeader), len(ours.Frames[0].DataHeader), string(sdk.Frames[0].DataHeader) == string(ours.Frames[0].DataHeader))
	}
	for i := 1; i < min(len(sdk.Frames), len(ours.Frames)); i++ {
		sc, err1 := bodyCodec(sdk.Frames[i].DataHeader)
		oc, err2 := bodyCodec(ours.Frames[i].DataHeader)
		if err1 != nil || err2 != nil {
			t.Fatalf("batch frame %d: read body compression: SDK %v, ours %v", i, err1, err2)
		}
		if sc != oc || (sc == -1) == compressed {
			t.Errorf("batch frame %d: body compression codec SDK %d, ours %d (compressed=%v; -1 none, 0 lz4_frame, 1 zstd)", i, sc, oc, compressed)
		}
		t.Logf("batch frame %d: codec %d/%d, body SDK %d bytes, ours %d bytes", i, sc, oc, len(sdk.Frames[i].DataBody), len(ours.Frames[i].DataBody))
	}
}

// checkFrames asserts the Flight shape of one recorded DoPut: frame 0 is the
// schema (no descriptor, no app_metadata, no body); frame n >= 1 carries a
// record batch with app_metadata exactly {"offset_id":n-1}; the decoded
// batches equal what was sent.
func checkFrames(t *testing.T, who string, frames []*flight.FlightData, want []arrow.RecordBatch) {
	t.Helper()
	if len(frames) != 1+len(want) {
		t.Errorf("%s: %d frames, want schema + %d batches", who, len(frames), len(want))
		return
	}
	for i, f := range frames {
		if f.FlightDescriptor != nil {
			t.Errorf("%s: frame %d carries a FlightDescriptor %v; the table is named only by header", who, i, f.FlightDescriptor)
		}
		if i == 0 {
			if len(f.AppMetadata) != 0 || len(f.DataBody) != 0 || len(f.DataHeader) == 0 {
				t.Errorf("%s: schema frame has app_metadata %q, body %d bytes, header %d bytes", who, f.AppMetadata, len(f.DataBody), len(f.DataHeader))
			}
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal(f.AppMetadata, &meta); err != nil {
			t.Errorf("%s: frame %d app_metadata %q is not JSON: %v", who, i, f.AppMetadata, err)
			continue
		}
		if !reflect.DeepEqual(meta, map[string]any{"offset_id": float64(i - 1)}) {
			t.Errorf("%s: frame %d app_metadata %s, want {\"offset_id\":%d}", who, i, f.AppMetadata, i-1)
		}
	}
	schema, recs, err := decodeFrames(frames)
	if err != nil {
		t.Errorf("%s: decode frames: %v", who, err)
		return
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if !schema.Equal(scenarioSchema) {
		t.Errorf("%s: schema frame decodes to\n%v\nwant\n%v", who, schema, scenarioSchema)
	}
	if len(recs) != len(want) {
		t.Errorf("%s: %d batches decoded, want %d", who, len(recs), len(want))
		return
	}
	for i := range recs {
		if !array.RecordEqual(recs[i], want[i]) {
			t.Errorf("%s: batch %d differs from what was sent", who, i)
		}
	}
}
