package zerobusreplay

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeIO serves files from memory and records each ReadFile and Open; a
// ReadFile of a path in block waits until it is released.
type fakeIO struct {
	files map[string][]byte

	mu      sync.Mutex
	reads   []string
	opens   []string
	block   map[string]chan struct{}
	started chan string
}

func (f *fakeIO) ReadFile(name string) ([]byte, error) {
	f.mu.Lock()
	f.reads = append(f.reads, name)
	ch := f.block[name]
	f.mu.Unlock()
	if f.started != nil {
		f.started <- name
	}
	if ch != nil {
		<-ch
	}
	b, ok := f.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "ReadFile", Path: name, Err: fs.ErrNotExist}
	}
	return append([]byte(nil), b...), nil
}

func (f *fakeIO) Open(name string) (iceio.File, error) {
	f.mu.Lock()
	f.opens = append(f.opens, name)
	f.mu.Unlock()
	return nil, errors.New("fakeIO: opened " + name)
}

func (f *fakeIO) Remove(string) error              { return errors.New("read-only") }
func (f *fakeIO) Stat(string) (fs.FileInfo, error) { return nil, fs.ErrNotExist }

func (f *fakeIO) readLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reads...)
}

func task(t *testing.T, path string, size int64) table.FileScanTask {
	t.Helper()
	b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, path, iceberg.ParquetFile, nil, nil, nil, 1, size)
	require.NoError(t, err)
	return table.FileScanTask{File: b.Build()}
}

func wholeIO(t *testing.T, f *fakeIO, plan *readPlan) iceio.IO {
	t.Helper()
	fsys, err := withWholeFiles(func(context.Context) (iceio.IO, error) { return f, nil }, plan)(context.Background())
	require.NoError(t, err)
	return fsys
}

// Small planned files are read whole, once each; a file above
// wholeFileMaxBytes, or one not planned, is opened as usual.
func TestWholeFilesReadSmallPlannedFilesInOneRequest(t *testing.T) {
	f := &fakeIO{files: map[string][]byte{"s3://b/a.parquet": []byte("PAR1-a"), "s3://b/b.parquet": []byte("PAR1-b")}}
	plan := &readPlan{readAhead: 0}
	plan.set([]table.FileScanTask{task(t, "s3://b/a.parquet", 6), task(t, "s3://b/big.parquet", wholeFileMaxBytes+1), task(t, "s3://b/b.parquet", 6)})
	fsys := wholeIO(t, f, plan)

	for _, name := range []string{"s3://b/a.parquet", "s3://b/b.parquet"} {
		file, err := fsys.Open(name)
		require.NoError(t, err)
		st, err := file.Stat()
		require.NoError(t, err)
		assert.EqualValues(t, 6, st.Size())
		got, err := io.ReadAll(file)
		require.NoError(t, err)
		assert.Equal(t, "PAR1-"+name[len("s3://b/"):len("s3://b/")+1], string(got))
		buf := make([]byte, 2)
		_, err = file.ReadAt(buf, 4)
		require.NoError(t, err)
		assert.Equal(t, "-"+name[len("s3://b/"):len("s3://b/")+1], string(buf))
	}
	_, err := fsys.Open("s3://b/big.parquet")
	require.Error(t, err, "a large file goes to the underlying Open")
	_, err = fsys.Open("s3://b/manifest.avro")
	require.Error(t, err, "an unplanned file goes to the underlying Open")
	assert.Equal(t, []string{"s3://b/a.parquet", "s3://b/b.parquet"}, f.readLog(), "read_ahead 0: each small file read once, when opened")
	assert.Equal(t, []string{"s3://b/big.parquet", "s3://b/manifest.avro"}, f.opens)

	_, err = fsys.Open("s3://b/missing.parquet")
	require.Error(t, err)
	plan.set([]table.FileScanTask{task(t, "s3://b/missing.parquet", 10)})
	_, err = fsys.Open("s3://b/missing.parquet")
	require.ErrorIs(t, err, fs.ErrNotExist, "a failed whole read is the open's error")
}

// With read_ahead N, opening a file starts fetching the next N small files
// and never more than N at once; the fetched bytes serve the later open
// without a second request, and a new read drops what was fetched ahead.
func TestReadAheadIsBounded(t *testing.T) {
	const n = 6
	f := &fakeIO{files: map[string][]byte{}, block: map[string]chan struct{}{}, started: make(chan string, 100)}
	var tasks []table.FileScanTask
	var names []string
	for i := range n {
		name := "s3://b/" + string(rune('a'+i)) + ".parquet"
		names = append(names, name)
		f.files[name] = []byte(name)
		tasks = append(tasks, task(t, name, int64(len(name))))
	}
	// Hold the fetches of c and d so they stay in flight.
	f.block[names[2]] = make(chan struct{})
	f.block[names[3]] = make(chan struct{})
	plan := &readPlan{readAhead: 2}
	plan.set(tasks)
	fsys := wholeIO(t, f, plan)

	file, err := fsys.Open(names[0])
	require.NoError(t, err)
	got, _ := io.ReadAll(file)
	assert.Equal(t, names[0], string(got))
	waitStarted(t, f, 3) // a, then b and c ahead
	assert.ElementsMatch(t, names[:3], f.readLog())

	file, err = fsys.Open(names[1]) // fetched ahead: no new request for b; d starts
	require.NoError(t, err)
	got, _ = io.ReadAll(file)
	assert.Equal(t, names[1], string(got))
	waitStarted(t, f, 1)
	assert.ElementsMatch(t, names[:4], f.readLog())
	time.Sleep(50 * time.Millisecond)
	assert.Len(t, f.readLog(), 4, "c and d in flight: read_ahead 2 starts nothing more")

	close(f.block[names[2]])
	file, err = fsys.Open(names[2]) // waits for its fetch, then e starts
	require.NoError(t, err)
	got, _ = io.ReadAll(file)
	assert.Equal(t, names[2], string(got))
	waitStarted(t, f, 1)
	assert.ElementsMatch(t, names[:5], f.readLog())

	// A new read: d and e, fetched ahead for the old one, are dropped.
	close(f.block[names[3]])
	plan.set(tasks[3:4])
	file, err = fsys.Open(names[3])
	require.NoError(t, err)
	got, _ = io.ReadAll(file)
	assert.Equal(t, names[3], string(got))
	waitStarted(t, f, 1)
	assert.Equal(t, names[3], f.readLog()[5], "d fetched again for the new read")
	plan.mu.Lock()
	assert.Empty(t, plan.ahead)
	plan.mu.Unlock()
}

func waitStarted(t *testing.T, f *fakeIO, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("a fetch did not start; reads so far %v", f.readLog())
		}
	}
}
