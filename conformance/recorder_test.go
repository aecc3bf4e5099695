package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	flatbuffers "github.com/google/flatbuffers/go"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// recorder is a minimal Zerobus look-alike that records what a client sends:
// the OAuth token request (HTTP), the call metadata, and every message of a
// Flight DoPut (FlightData frames). It answers just enough of the protocol
// (token, ready signal, acks) for a client to complete one stream. It checks
// nothing: the tests compare what it captured.
type recorder struct {
	grpcAddr string
	httpURL  string

	mu          sync.Mutex
	tokenStatus int // non-zero: the token endpoint fails with it
	tokens      []tokenRequest
	calls       []*recordedCall
}

type tokenRequest struct {
	Path        string
	ContentType string
	User, Pass  string
	Form        url.Values
}

type recordedCall struct {
	Method string
	MD     metadata.MD
	Frames []*flight.FlightData // DoPut
}

// rawFrame carries undecoded gRPC message bytes through the recorder's codec.
type rawFrame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("rawCodec: unexpected %T", v)
	}
	return f.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("rawCodec: unexpected %T", v)
	}
	f.b = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(r.handle))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r.grpcAddr = lis.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	r.httpURL = "http://" + hl.Addr().String()
	return r
}

func (r *recorder) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/.well-known/databricks-config" {
		// The workspace id the official SDK derives from an http://127.0.0.1
		// endpoint; clients that discover it instead get the same answer.
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"workspace_id":"`+confWorkspaceID+`","host":"`+r.httpURL+`"}`)
		return
	}
	if req.URL.Path != "/oidc/v1/token" {
		http.NotFound(w, req)
		return
	}
	body, _ := io.ReadAll(req.Body)
	form, _ := url.ParseQuery(string(body))
	tr := tokenRequest{Path: req.URL.Path, ContentType: req.Header.Get("Content-Type"), Form: form}
	if u, p, ok := req.BasicAuth(); ok {
		tr.User, tr.Pass = u, p
	}
	r.mu.Lock()
	r.tokens = append(r.tokens, tr)
	n := len(r.tokens)
	tokenStatus := r.tokenStatus
	r.mu.Unlock()
	if tokenStatus != 0 {
		http.Error(w, "recorder: injected token failure", tokenStatus)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": fmt.Sprintf("recorded-token-%d", n),
		"token_type":   "Bearer",
		"expires_in":   3600,
	})
}

const doPutMethod = "/arrow.flight.protocol.FlightService/DoPut"

func (r *recorder) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	call := &recordedCall{Method: method, MD: md.Copy()}
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
	if method != doPutMethod {
		return status.Errorf(codes.Unimplemented, "recorder: %s not recorded", method)
	}

	send := func(meta string) error {
		pr := &flight.PutResult{AppMetadata: []byte(meta)}
		b, err := proto.Marshal(pr)
		if err != nil {
			return err
		}
		return ss.SendMsg(&rawFrame{b: b})
	}
	// Ready signal first, as the service does after auth and schema checks.
	if err := send(`{"ack_up_to_offset":-1,"ack_up_to_records":0}`); err != nil {
		return err
	}

	frames := make(chan *flight.FlightData, 1)
	var reader *flight.Reader
	var rows uint64
	for n := 0; ; n++ {
		var f rawFrame
		if err := ss.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		fd := &flight.FlightData{}
		if err := proto.Unmarshal(f.b, fd); err != nil {
			return status.Errorf(codes.InvalidArgument, "recorder: bad FlightData: %v", err)
		}
		r.mu.Lock()
		call.Frames = append(call.Frames, fd)
		r.mu.Unlock()

		frames <- fd
		if n == 0 {
			rd, err := flight.NewRecordReader(chanStream(frames))
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "recorder: schema frame: %v", err)
			}
			reader = rd
			continue
		}
		if !reader.Next() {
			return status.Errorf(codes.InvalidArgument, "recorder: batch frame %d: %v", n, reader.Err())
		}
		rows += uint64(reader.RecordBatch().NumRows())
		if err := send(fmt.Sprintf(`{"ack_up_to_offset":%d,"ack_up_to_records":%d}`, n-1, rows)); err != nil {
			return err
		}
	}
}

type chanStream chan *flight.FlightData

func (c chanStream) Recv() (*flight.FlightData, error) { return <-c, nil }

// failTokens makes the token endpoint answer every request with status.
func (r *recorder) failTokens(status int) {
	r.mu.Lock()
	r.tokenStatus = status
	r.mu.Unlock()
}

func (r *recorder) snapshot() ([]tokenRequest, []*recordedCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tokenRequest(nil), r.tokens...), append([]*recordedCall(nil), r.calls...)
}

// doPut returns the single recorded DoPut call, failing the test otherwise.
func (r *recorder) doPut(t *testing.T) *recordedCall { t.Helper(); return r.only(t, doPutMethod) }

// only returns the single recorded call, which must be of method.
func (r *recorder) only(t *testing.T, method string) *recordedCall {
	t.Helper()
	_, calls := r.snapshot()
	var got []*recordedCall
	var others []string
	for _, c := range calls {
		if c.Method == method {
			got = append(got, c)
		} else {
			others = append(others, c.Method)
		}
	}
	if len(got) != 1 || len(others) != 0 {
		t.Fatalf("want exactly one %s call, got %d (other calls: %v)", method, len(got), others)
	}
	return got[0]
}

// sliceStream replays recorded frames to a flight.Reader.
type sliceStream struct{ frames []*flight.FlightData }

func (s *sliceStream) Recv() (*flight.FlightData, error) {
	if len(s.frames) == 0 {
		return nil, io.EOF
	}
	f := s.frames[0]
	s.frames = s.frames[1:]
	return f, nil
}

// decodeFrames decodes a recorded DoPut (schema frame then batch frames).
func decodeFrames(frames []*flight.FlightData) (*arrow.Schema, []arrow.RecordBatch, error) {
	rd, err := flight.NewRecordReader(&sliceStream{frames: frames})
	if err != nil {
		return nil, nil, err
	}
	defer rd.Release()
	var recs []arrow.RecordBatch
	for rd.Next() {
		rec := rd.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	return rd.Schema(), recs, nil
}

// decodeSchema decodes a schema FlightData frame into an Arrow schema.
func decodeSchema(fd *flight.FlightData) (*arrow.Schema, error) {
	c := make(chan *flight.FlightData, 1)
	c <- fd
	rd, err := flight.NewRecordReader(chanStream(c))
	if err != nil {
		return nil, err
	}
	return rd.Schema(), nil
}

// bodyCodec reads the IPC body compression codec of a record-batch
// FlightData data_header (an Arrow IPC Message flatbuffer): -1 for none,
// 0 LZ4_FRAME, 1 ZSTD.
func bodyCodec(header []byte) (int, error) {
	if len(header) < 8 {
		return 0, fmt.Errorf("data_header too short (%d bytes)", len(header))
	}
	msg := &flatbuffers.Table{Bytes: header, Pos: flatbuffers.GetUOffsetT(header)}
	// Message: version(0) header_type(1) header(2) bodyLength(3) custom_metadata(4)
	if o := flatbuffers.UOffsetT(msg.Offset(4 + 2*1)); o == 0 || msg.GetByte(o+msg.Pos) != 3 { // 3 = RecordBatch
		return 0, fmt.Errorf("data_header is not a RecordBatch message")
	}
	o := flatbuffers.UOffsetT(msg.Offset(4 + 2*2))
	if o == 0 {
		return 0, fmt.Errorf("RecordBatch message without header")
	}
	rb := &flatbuffers.Table{Bytes: header, Pos: msg.Indirect(o + msg.Pos)}
	// RecordBatch: length(0) nodes(1) buffers(2) compression(3)
	co := flatbuffers.UOffsetT(rb.Offset(4 + 2*3))
	if co == 0 {
		return -1, nil
	}
	bc := &flatbuffers.Table{Bytes: header, Pos: rb.Indirect(co + rb.Pos)}
	// BodyCompression: codec(0) method(1); codec defaults to LZ4_FRAME (0).
	if fo := flatbuffers.UOffsetT(bc.Offset(4)); fo != 0 {
		return int(bc.GetInt8(fo + bc.Pos)), nil
	}
	return 0, nil
}
