package zerobusreplay

import (
	"bytes"
	"context"
	"io/fs"
	"path"
	"sync"
	"time"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// wholeFileMaxBytes is the largest data file fetched whole, in one GET, and
// read from memory. A Parquet reader opening an object store file issues
// one ranged GET for the footer length, one for the footer and one per
// column chunk (after iceberg-go's Open has already started a GET of the
// whole object); for the small files a streaming writer leaves, those
// round trips, not decoding, are the replay's cost. A file up to this size
// costs one request instead. Larger files are read as iceberg-go reads
// them, range by range.
const wholeFileMaxBytes = 8 << 20

// readPlan is the data files of the current scan read, in the order the
// scan opens them (it reads one file at a time), with the whole small files
// fetched ahead of the one being read.
//
// Memory: besides the file being decoded (at most wholeFileMaxBytes when
// fetched whole), at most readAhead fetched-ahead files are held, each at
// most wholeFileMaxBytes; so the input's raw file bytes are bounded by
// (1 + read_ahead) × wholeFileMaxBytes whatever the table size.
type readPlan struct {
	readAhead int

	mu    sync.Mutex
	files []plannedFile    // the current read's files, in order
	index map[string]int   // path → position in files
	ahead map[string]*grab // fetches started ahead, readAhead at most
}

type plannedFile struct {
	path string
	size int64
}

// grab is a whole-file fetch; done is closed once data/err are set.
type grab struct {
	done chan struct{}
	data []byte
	err  error
}

// set makes tasks the current read's files and drops what was fetched
// ahead for the previous read.
func (r *readPlan) set(tasks []table.FileScanTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files = r.files[:0]
	r.index = make(map[string]int, len(tasks))
	for i, t := range tasks {
		r.files = append(r.files, plannedFile{path: t.File.FilePath(), size: t.File.FileSizeBytes()})
		r.index[t.File.FilePath()] = i
	}
	r.ahead = map[string]*grab{}
}

// open returns the whole contents of name when it is a planned file small
// enough to fetch whole (ok false otherwise), waiting for a fetch started
// ahead or fetching it now, and starts fetching the next readAhead small
// files of the read.
func (r *readPlan) open(fsys iceio.ReadFileIO, name string) (data []byte, ok bool, err error) {
	r.mu.Lock()
	i, planned := r.index[name]
	if !planned || r.files[i].size > wholeFileMaxBytes {
		r.mu.Unlock()
		return nil, false, nil
	}
	g := r.ahead[name]
	delete(r.ahead, name)
	r.fetchAhead(fsys, i)
	r.mu.Unlock()
	if g == nil {
		data, err = fsys.ReadFile(name)
		return data, true, err
	}
	<-g.done
	return g.data, true, g.err
}

// fetchAhead starts fetching, in the background, the small files after
// position i that are not fetched yet, keeping at most readAhead fetched
// ahead. Callers hold r.mu.
func (r *readPlan) fetchAhead(fsys iceio.ReadFileIO, i int) {
	for j := i + 1; j < len(r.files) && j <= i+r.readAhead && len(r.ahead) < r.readAhead; j++ {
		f := r.files[j]
		if f.size > wholeFileMaxBytes || r.ahead[f.path] != nil {
			continue
		}
		g := &grab{done: make(chan struct{})}
		r.ahead[f.path] = g
		go func() {
			g.data, g.err = fsys.ReadFile(f.path)
			close(g.done)
		}()
	}
}

// wholeFileIO is a file IO that reads the small planned data files whole.
type wholeFileIO struct {
	fileIO
	plan *readPlan
}

// fileIO is what wholeFileIO needs of the file IO it wraps: Open, ReadFile
// (one GET of a whole object) and Stat (iceberg-go stats manifest lists).
type fileIO interface {
	iceio.ReadFileIO
	iceio.StatIO
}

// withWholeFiles wraps the file IOs fsF returns in a wholeFileIO, or
// leaves them as they are when they cannot read a whole file.
func withWholeFiles(fsF table.FSysF, plan *readPlan) table.FSysF {
	return func(ctx context.Context) (iceio.IO, error) {
		fsys, err := fsF(ctx)
		if err != nil {
			return nil, err
		}
		if f, ok := fsys.(fileIO); ok {
			return wholeFileIO{fileIO: f, plan: plan}, nil
		}
		return fsys, nil
	}
}

// Open serves a small planned data file from memory, fetched whole; any
// other file is opened as usual.
func (w wholeFileIO) Open(name string) (iceio.File, error) {
	data, ok, err := w.plan.open(w.fileIO, name)
	if err != nil {
		return nil, err
	}
	if ok {
		return &memFile{Reader: bytes.NewReader(data), name: path.Base(name), size: int64(len(data))}, nil
	}
	return w.fileIO.Open(name)
}

// memFile is a data file read whole into memory.
type memFile struct {
	*bytes.Reader
	name string
	size int64
}

func (f *memFile) Close() error               { return nil }
func (f *memFile) Stat() (fs.FileInfo, error) { return f, nil }
func (f *memFile) Name() string               { return f.name }
func (f *memFile) Size() int64                { return f.size }
func (f *memFile) Mode() fs.FileMode          { return 0o444 }
func (f *memFile) ModTime() time.Time         { return time.Time{} }
func (f *memFile) IsDir() bool                { return false }
func (f *memFile) Sys() any                   { return nil }
