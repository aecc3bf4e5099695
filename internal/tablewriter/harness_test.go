package tablewriter

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

const testTable = "main.default.events"

// testRow is a Row: JSON bytes, or a value already decoded (as a Bloblang
// mapping leaves a message).
type testRow struct {
	b          []byte
	v          any
	structured bool
}

func (r testRow) AsBytes() ([]byte, error) {
	if r.structured {
		return json.Marshal(r.v)
	}
	return r.b, nil
}

func (r testRow) HasStructured() bool { return r.structured }

// AsStructured decodes the bytes as Benthos does, numbers kept exact.
func (r testRow) AsStructured() (any, error) {
	if r.structured {
		return r.v, nil
	}
	d := json.NewDecoder(bytes.NewReader(r.b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func rows(bodies ...string) []Row {
	out := make([]Row, len(bodies))
	for i, b := range bodies {
		out[i] = testRow{b: []byte(b)}
	}
	return out
}

func structuredRow(v any) Row { return testRow{v: v, structured: true} }

type harness struct {
	w      *Writer
	opener *ingestfake.Opener
	cat    *catalogfake.Catalog
}

// newHarness builds an open writer over a fake opener and catalog; cfg (may
// be nil) adjusts the test config, setup (may be nil) the catalog.
func newHarness(t *testing.T, fc ingestfake.Config, cfg func(*Config), setup func(*catalogfake.Catalog)) *harness {
	t.Helper()
	cat := catalogfake.New()
	if setup != nil {
		setup(cat)
	} else {
		cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	}
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig()}
	if cfg != nil {
		cfg(&c)
	}
	opener := ingestfake.NewOpener(fc)
	w := New(c, opener, cat, nil, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	return &harness{w: w, opener: opener, cat: cat}
}

func testPoolConfig() pool.Config {
	pc := pool.DefaultConfig()
	pc.MinStreams, pc.MaxStreams = 2, 2
	return pc
}

// write writes batch and returns its failed rows by index (error text); the
// write itself must succeed.
func (h *harness) write(t *testing.T, batch []Row) map[int]string {
	t.Helper()
	rowErrs, err := h.w.Write(context.Background(), batch, nil)
	require.NoError(t, err)
	failed := map[int]string{}
	for _, re := range rowErrs {
		failed[re.Index] = re.Error()
	}
	return failed
}

// writeConcurrently writes n one-row batches at once, body(i) the row of the
// i-th, and returns their Write errors.
func (h *harness) writeConcurrently(n int, body func(i int) string) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.w.Write(context.Background(), rows(body(i)), nil)
		}()
	}
	wg.Wait()
	return errs
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// skipWait lets the next Open try at once, as if the wait the lifecycle
// chose after the last failure had passed (the engine sleeps it between
// Connects).
func skipWait(w *Writer) {
	w.life.mu.Lock()
	w.life.until = time.Time{}
	w.life.mu.Unlock()
}
