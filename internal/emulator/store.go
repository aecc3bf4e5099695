package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Group commit tuning: a commit waits at most groupWindow for more rows once
// it has fewer than groupRows queued. Batches that arrive while a commit is
// being fsync'd are picked up by the next one, so under load commits coalesce
// on their own.
const (
	groupWindow = 2 * time.Millisecond
	groupRows   = 64 << 10
	// maxQueuedBytes bounds the memory of batches waiting for a commit;
	// beyond it submit blocks, which back-pressures the streams through
	// gRPC flow control instead of buffering without limit.
	maxQueuedBytes = 256 << 20
)

var logName = regexp.MustCompile(`^(\d{20})\.json$`)

type writeReq struct {
	rec  arrow.RecordBatch // owned by the store once queued
	size int64
	done chan error // buffered, receives exactly one value
}

// tableStore is one table's storage: Parquet files plus a Delta log under
// dir. Writes are group-committed by one goroutine: every queued batch is
// written to Parquet (one file per distinct Arrow schema), the files and the
// directory are fsync'd, a Delta commit naming them is written, fsync'd and
// renamed into _delta_log, and only then are the writers told their rows are
// durable.
type tableStore struct {
	fullName string
	// tableID is the id of the registry table this store holds the data
	// of. A table dropped and created again under its name is another
	// table: its data goes to a new store, never to this one (Server.store).
	tableID string
	dir     string
	reg     *workspace.Registry
	log     *slog.Logger
	// onDataCommit, if set, is called with fullName after each data commit
	// is durable and before its writers are acknowledged, so that the
	// workspace side (Delta version, Iceberg conversion) never lags behind
	// what a client has been told is stored.
	onDataCommit func(fullName string)
	// deltaVersion, if set, returns the workspace's Delta version of
	// fullName; each data commit is recorded with it so that the Iceberg
	// conversion can tell which commits a converted version holds.
	deltaVersion func(fullName string) (int64, bool)

	// icebergMu orders a data commit's publication (files, workspace
	// version, dataLog) against Iceberg metadata generation, so that a
	// converted version never names a commit dataLog does not hold yet.
	icebergMu sync.Mutex

	mu          sync.Mutex
	cond        *sync.Cond
	queue       []writeReq
	queuedRows  int64
	queuedBytes int64
	closing     bool
	loopDone    chan struct{}
	// gone is closed when the table is dropped (drop): the streams open on
	// it end, and what was queued is failed, not committed.
	gone    chan struct{}
	dropped bool

	// Guarded by mu; written only by the commit loop after replay.
	nextVersion int64
	files       []string // live Parquet files, relative to dir, in commit order
	rows        int64
	commits     int64  // data commits made since this store was opened
	dataCommits int64  // data commits in the whole log, replayed ones included
	metaKey     string // schemaString + configuration of the last metaData
	protoKey    string // protocol action last written
	logTableID  string // the metaData id the log gives the table
	// dataLog lists every data commit in log order with the files it added,
	// for the Iceberg metadata generated over them (iceberg.go).
	dataLog []dataCommit
}

// dataCommit is one Delta data commit as the Iceberg conversion sees it.
type dataCommit struct {
	// version is the workspace Delta version the commit made; -1 for
	// commits replayed at start, which the workspace counts as converted.
	version int64
	at      time.Time
	files   []dataFile
}

// dataFile is one Parquet file a data commit added.
type dataFile struct {
	path       string // relative to the table directory
	size, rows int64
}

// openTableStore recovers the table stored under dir from its Delta log
// (writing the CREATE TABLE commit for a new table) and starts its commit
// loop. onDataCommit may be nil; see tableStore.onDataCommit.
func openTableStore(fullName, dir string, reg *workspace.Registry, log *slog.Logger, onDataCommit func(string), deltaVersion func(string) (int64, bool)) (*tableStore, error) {
	ts := &tableStore{fullName: fullName, dir: dir, reg: reg, log: log, onDataCommit: onDataCommit, deltaVersion: deltaVersion,
		loopDone: make(chan struct{}), gone: make(chan struct{})}
	ts.cond = sync.NewCond(&ts.mu)
	t, ok := reg.Get(fullName)
	if ok {
		ts.tableID = t.TableID
	}
	if err := os.MkdirAll(filepath.Join(dir, "_delta_log"), 0o755); err != nil {
		return nil, fmt.Errorf("create table dir: %w", err)
	}
	if err := ts.replay(); err != nil {
		return nil, err
	}
	if ok && ts.logTableID != "" && ts.logTableID != t.TableID {
		// The directory holds a dropped table of the same name (the
		// emulator stopped between the drop and the removal of its
		// files): none of it belongs to this table.
		log.Info("removing the data of a dropped table of the same name", "table", fullName, "dropped_table_id", ts.logTableID, "table_id", t.TableID)
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("remove the data of dropped table %s (id %s): %w", fullName, ts.logTableID, err)
		}
		return openTableStore(fullName, dir, reg, log, onDataCommit, deltaVersion)
	}
	if ts.nextVersion == 0 {
		// Version 0 is the CREATE TABLE commit, so even an empty table is a
		// Delta table a reader can open.
		if t, ok := reg.Get(fullName); ok {
			if err := ts.commitActions(t, time.Now(), "CREATE TABLE", nil); err != nil {
				return nil, fmt.Errorf("initial delta commit of %s: %w", fullName, err)
			}
		}
	}
	go ts.loop()
	return ts, nil
}

// deltaAction is one line of a Delta commit file (only the parts used here).
type deltaAction struct {
	Protocol   *deltaProtocol `json:"protocol,omitempty"`
	MetaData   *deltaMetaData `json:"metaData,omitempty"`
	Add        *deltaAdd      `json:"add,omitempty"`
	Remove     *deltaRemove   `json:"remove,omitempty"`
	CommitInfo map[string]any `json:"commitInfo,omitempty"`
}

type deltaProtocol struct {
	MinReaderVersion int      `json:"minReaderVersion"`
	MinWriterVersion int      `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

type deltaFormat struct {
	Provider string            `json:"provider"`
	Options  map[string]string `json:"options"`
}

type deltaMetaData struct {
	ID               string            `json:"id"`
	Name             string            `json:"name,omitempty"`
	Description      string            `json:"description,omitempty"`
	Format           deltaFormat       `json:"format"`
	SchemaString     string            `json:"schemaString"`
	PartitionColumns []string          `json:"partitionColumns"`
	Configuration    map[string]string `json:"configuration"`
	CreatedTime      int64             `json:"createdTime"`
}

type deltaAdd struct {
	Path             string            `json:"path"`
	PartitionValues  map[string]string `json:"partitionValues"`
	Size             int64             `json:"size"`
	ModificationTime int64             `json:"modificationTime"`
	DataChange       bool              `json:"dataChange"`
	Stats            string            `json:"stats,omitempty"`
}

type deltaRemove struct {
	Path string `json:"path"`
}

// replay rebuilds the live file list and row count from _delta_log, removes
// unfinished commit files, and deletes Parquet files no commit references
// (written by a commit that never completed).
func (ts *tableStore) replay() error {
	logDir := filepath.Join(ts.dir, "_delta_log")
	entries, err := os.ReadDir(logDir)
	if err != nil {
		return fmt.Errorf("read delta log: %w", err)
	}
	var versions []int64
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			_ = os.Remove(filepath.Join(logDir, name))
			continue
		}
		if m := logName.FindStringSubmatch(name); m != nil {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			versions = append(versions, v)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	live := map[string]int64{}
	var order []string
	for i, v := range versions {
		if v != int64(i) {
			return fmt.Errorf("delta log of %s: version %d missing", ts.fullName, i)
		}
		dc, err := ts.replayCommit(filepath.Join(logDir, fmt.Sprintf("%020d.json", v)), live, &order)
		if err != nil {
			return fmt.Errorf("delta log of %s: version %d: %w", ts.fullName, v, err)
		}
		if dc != nil {
			ts.dataCommits++
			ts.dataLog = append(ts.dataLog, *dc)
		}
	}
	ts.nextVersion = int64(len(versions))
	for _, p := range order {
		if n, ok := live[p]; ok {
			ts.files = append(ts.files, p)
			ts.rows += n
		}
	}
	// Orphans: data files of commits that never landed.
	dataEntries, err := os.ReadDir(ts.dir)
	if err != nil {
		return fmt.Errorf("read table dir: %w", err)
	}
	for _, e := range dataEntries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".parquet") {
			continue
		}
		if _, ok := live[name]; !ok {
			ts.log.Info("removing orphan data file", "table", ts.fullName, "file", name)
			if err := os.Remove(filepath.Join(ts.dir, name)); err != nil {
				return fmt.Errorf("remove orphan %s: %w", name, err)
			}
		}
	}
	return nil
}

// replayCommit applies one commit file to live (path -> rows) and order,
// and returns the data commit it was (one that adds files), or nil.
func (ts *tableStore) replayCommit(path string, live map[string]int64, order *[]string) (*dataCommit, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var data *dataCommit
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var a deltaAction
		if err := json.Unmarshal(line, &a); err != nil {
			return nil, fmt.Errorf("bad action: %w", err)
		}
		switch {
		case a.Add != nil:
			var st struct {
				NumRecords int64 `json:"numRecords"`
			}
			if a.Add.Stats != "" {
				if err := json.Unmarshal([]byte(a.Add.Stats), &st); err != nil {
					return nil, fmt.Errorf("bad stats of %s: %w", a.Add.Path, err)
				}
			}
			if data == nil {
				data = &dataCommit{version: -1, at: time.UnixMilli(a.Add.ModificationTime)}
			}
			data.files = append(data.files, dataFile{path: a.Add.Path, size: a.Add.Size, rows: st.NumRecords})
			if _, ok := live[a.Add.Path]; !ok {
				*order = append(*order, a.Add.Path)
			}
			live[a.Add.Path] = st.NumRecords
		case a.Remove != nil:
			delete(live, a.Remove.Path)
		case a.MetaData != nil:
			ts.metaKey = metaKey(a.MetaData.SchemaString, a.MetaData.Configuration)
			ts.logTableID = a.MetaData.ID
		case a.Protocol != nil:
			pb, _ := json.Marshal(a.Protocol)
			ts.protoKey = string(pb)
		}
	}
	return data, sc.Err()
}

func metaKey(schema string, conf map[string]string) string {
	cb, _ := json.Marshal(conf)
	return schema + "\x00" + string(cb)
}

// submit queues a batch; the returned channel receives nil once its rows are
// durable, or the commit error. The store takes ownership of rec. It blocks
// while more than maxQueuedBytes wait for a commit.
func (ts *tableStore) submit(rec arrow.RecordBatch) <-chan error {
	done := make(chan error, 1)
	size := arrowipc.RecordBytes(rec)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for ts.queuedBytes > 0 && ts.queuedBytes+size > maxQueuedBytes && !ts.closing {
		ts.cond.Wait()
	}
	if ts.closing {
		rec.Release()
		if ts.dropped {
			done <- ts.droppedErr()
		} else {
			done <- errors.New("table store is closed")
		}
		return done
	}
	ts.queue = append(ts.queue, writeReq{rec: rec, size: size, done: done})
	ts.queuedRows += rec.NumRows()
	ts.queuedBytes += size
	ts.cond.Broadcast()
	return done
}

func (ts *tableStore) loop() {
	defer close(ts.loopDone)
	for {
		ts.mu.Lock()
		for len(ts.queue) == 0 && !ts.closing {
			ts.cond.Wait()
		}
		if len(ts.queue) == 0 && ts.closing {
			ts.mu.Unlock()
			return
		}
		if ts.queuedRows < groupRows && !ts.closing {
			ts.mu.Unlock()
			time.Sleep(groupWindow)
			ts.mu.Lock()
		}
		batch := ts.queue
		ts.queue, ts.queuedRows, ts.queuedBytes = nil, 0, 0
		ts.cond.Broadcast() // wake submitters blocked on maxQueuedBytes
		dropped := ts.dropped
		ts.mu.Unlock()

		var err error
		if dropped {
			err = ts.droppedErr()
		} else {
			err = ts.commit(batch)
		}
		if err != nil && !errors.Is(err, errTableDropped) {
			ts.log.Error("commit failed", "table", ts.fullName, "err", err)
		}
		for _, req := range batch {
			req.rec.Release()
			req.done <- err
		}
	}
}

// close commits what is queued and stops the commit loop.
func (ts *tableStore) close() {
	ts.mu.Lock()
	ts.closing = true
	ts.cond.Broadcast()
	ts.mu.Unlock()
	<-ts.loopDone
}

// errTableDropped is the failure of a write to a table dropped before the
// write was durable.
var errTableDropped = errors.New("table dropped")

func (ts *tableStore) droppedErr() error {
	return fmt.Errorf("%w: table %s (table_id %s) was dropped before the rows were durable", errTableDropped, ts.fullName, ts.tableID)
}

// drop retires the store of a dropped table: the streams open on it end
// (gone), the batches queued and not yet committed fail, a commit in
// progress finishes (its rows were in the table when it was dropped, and are
// gone with it), and the commit loop stops. The caller removes the files.
func (ts *tableStore) drop() {
	ts.mu.Lock()
	if !ts.dropped {
		ts.dropped = true
		close(ts.gone)
	}
	ts.closing = true
	ts.cond.Broadcast()
	ts.mu.Unlock()
	<-ts.loopDone
}

func (ts *tableStore) counts() (rows, commits, version int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.rows, ts.commits, ts.nextVersion - 1
}

// dataCommitCount is the number of data commits in the table's Delta log,
// those replayed at open included.
func (ts *tableStore) dataCommitCount() int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.dataCommits
}

// commit makes one Delta version out of the queued batches.
func (ts *tableStore) commit(batch []writeReq) error {
	t, ok := ts.reg.Get(ts.fullName)
	if !ok || t.TableID != ts.tableID {
		return ts.droppedErr()
	}
	// One Parquet file per distinct schema (streams may omit nullable
	// columns, and streams opened before a schema change keep theirs).
	type group struct {
		schema *arrow.Schema
		recs   []arrow.RecordBatch
		rows   int64
	}
	var groups []*group
	for _, req := range batch {
		var g *group
		for _, cand := range groups {
			if cand.schema.Equal(req.rec.Schema()) {
				g = cand
				break
			}
		}
		if g == nil {
			g = &group{schema: req.rec.Schema()}
			groups = append(groups, g)
		}
		g.recs = append(g.recs, req.rec)
		g.rows += req.rec.NumRows()
	}

	now := time.Now()
	var (
		actions []deltaAction
		written []string
		added   []dataFile
		total   int64
	)
	cleanup := func() {
		for _, p := range written {
			_ = os.Remove(filepath.Join(ts.dir, p))
		}
	}
	for i, g := range groups {
		if g.rows == 0 {
			continue
		}
		name := fmt.Sprintf("part-%05d-%s-c000.zstd.parquet", i, workspace.RandomHex(16))
		// Files carry Iceberg field ids, so that the Iceberg metadata
		// generated over them later (iceberg.go) reads them as they are.
		size, err := writeParquet(filepath.Join(ts.dir, name), withFieldIDs(g.schema, t.Columns), g.recs)
		if err != nil {
			cleanup()
			return fmt.Errorf("write %s: %w", name, err)
		}
		written = append(written, name)
		added = append(added, dataFile{path: name, size: size, rows: g.rows})
		total += g.rows
		actions = append(actions, deltaAction{Add: &deltaAdd{
			Path:             name,
			PartitionValues:  map[string]string{},
			Size:             size,
			ModificationTime: now.UnixMilli(),
			DataChange:       true,
			Stats:            fmt.Sprintf(`{"numRecords":%d}`, g.rows),
		}})
	}
	if len(actions) == 0 {
		return nil // nothing but empty batches: durable trivially
	}
	if err := syncDir(ts.dir); err != nil {
		cleanup()
		return err
	}

	if err := ts.catchUpMetadata(t, now); err != nil {
		cleanup()
		return err
	}
	if err := ts.commitActions(t, now, "STREAMING UPDATE", actions); err != nil {
		cleanup()
		return err
	}
	ts.icebergMu.Lock()
	defer ts.icebergMu.Unlock()
	ts.mu.Lock()
	ts.files = append(ts.files, written...)
	ts.rows += total
	ts.commits++
	ts.dataCommits++
	ts.mu.Unlock()
	if ts.onDataCommit != nil {
		ts.onDataCommit(ts.fullName)
	}
	version := int64(-1)
	if ts.deltaVersion != nil {
		if v, ok := ts.deltaVersion(ts.fullName); ok {
			version = v
		}
	}
	ts.mu.Lock()
	ts.dataLog = append(ts.dataLog, dataCommit{version: version, at: now, files: added})
	ts.mu.Unlock()
	return nil
}

// catchUpMetadata writes one metadata-only commit for each registry change
// (ALTER TABLE, COMMENT, TBLPROPERTIES …) the Delta log does not have yet,
// as Delta makes one commit per such change. The workspace numbers Delta
// versions as registry changes plus data commits (workspace.DeltaVersion)
// and reports the Iceberg conversion (converted_delta_version) in that
// numbering; without these commits the log's numbers would fall behind it,
// and a reader comparing the newest log version with the converted one
// would take a lagging conversion for a current one.
func (ts *tableStore) catchUpMetadata(t workspace.Table, now time.Time) error {
	if ts.deltaVersion == nil {
		return nil
	}
	cur, ok := ts.deltaVersion(ts.fullName)
	if !ok {
		return nil
	}
	for {
		ts.mu.Lock()
		next := ts.nextVersion
		ts.mu.Unlock()
		if next > cur {
			return nil
		}
		if err := ts.commitActions(t, now, "CHANGE METADATA", nil); err != nil {
			return err
		}
	}
}

// commitActions writes the next Delta version: commitInfo, then protocol and
// metaData when they differ from what the log already says (always in
// version 0), then the given actions.
func (ts *tableStore) commitActions(t workspace.Table, now time.Time, op string, actions []deltaAction) error {
	ts.mu.Lock()
	version := ts.nextVersion
	ts.mu.Unlock()
	proto := protocolFor(t)
	pb, _ := json.Marshal(proto)
	meta := metaDataFor(t)
	mk := metaKey(meta.SchemaString, meta.Configuration)
	params := map[string]any{"outputMode": "Append"}
	if op == "CREATE TABLE" {
		params = map[string]any{"isManaged": "true"}
	}
	all := []deltaAction{{CommitInfo: map[string]any{
		"timestamp":           now.UnixMilli(),
		"operation":           op,
		"operationParameters": params,
		"isBlindAppend":       true,
		"engineInfo":          "benthos-zerobus-emulator",
	}}}
	if version == 0 || string(pb) != ts.protoKey {
		all = append(all, deltaAction{Protocol: proto})
	}
	if version == 0 || mk != ts.metaKey {
		all = append(all, deltaAction{MetaData: meta})
	}
	all = append(all, actions...)
	if err := ts.writeLog(version, all); err != nil {
		return err
	}
	ts.mu.Lock()
	ts.nextVersion = version + 1
	ts.protoKey = string(pb)
	ts.metaKey = mk
	ts.mu.Unlock()
	return nil
}

// writeLog writes the commit to a temporary file, fsyncs it, renames it to
// its version name and fsyncs the directory: a crash leaves either no commit
// or the whole commit.
func (ts *tableStore) writeLog(version int64, actions []deltaAction) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, a := range actions {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("encode delta action: %w", err)
		}
	}
	logDir := filepath.Join(ts.dir, "_delta_log")
	tmp := filepath.Join(logDir, ".tmp-"+workspace.RandomHex(8))
	if err := writeFileSync(tmp, buf.Bytes()); err != nil {
		return err
	}
	final := filepath.Join(logDir, fmt.Sprintf("%020d.json", version))
	if _, err := os.Stat(final); err == nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("delta log version %d already exists", version)
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("publish delta commit %d: %w", version, err)
	}
	return syncDir(logDir)
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// writeParquet writes the batches as one zstd Parquet file and fsyncs it.
func writeParquet(path string, schema *arrow.Schema, recs []arrow.RecordBatch) (int64, error) {
	buf, err := encodeParquet(schema, recs)
	if err != nil {
		return 0, err
	}
	if err := writeFileSync(path, buf.Bytes()); err != nil {
		return 0, err
	}
	return int64(buf.Len()), nil
}

// encodeParquet is the Parquet file of recs (zstd), in memory.
func encodeParquet(schema *arrow.Schema, recs []arrow.RecordBatch) (*bytes.Buffer, error) {
	return encodeParquetWith(schema, recs, compress.Codecs.Zstd)
}

// encodeParquetWith is encodeParquet with codec (the fuzz targets skip
// the cost of zstd).
func encodeParquetWith(schema *arrow.Schema, recs []arrow.RecordBatch, codec compress.Compression) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(
		parquet.WithCompression(codec),
		parquet.WithAllocator(memory.DefaultAllocator),
	)
	w, err := pqarrow.NewFileWriter(schema, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, fmt.Errorf("parquet writer: %w", err)
	}
	for _, rec := range recs {
		if rec.NumRows() == 0 {
			continue
		}
		// The writer's schema carries field ids the batch's may lack.
		r := withSchema(rec, schema)
		err := w.WriteBuffered(r)
		r.Release()
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("parquet write: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("parquet close: %w", err)
	}
	return &buf, nil
}

// protocolFor picks the lowest Delta protocol that can describe the table:
// TIMESTAMP_NTZ columns need the timestampNtz table feature, a table with
// delta.enableDeletionVectors on must list deletionVectors (Delta forbids the
// property without the feature; Databricks turns it on at CREATE), and a
// table with delta.enableTypeWidening has files written before a widening, so
// readers need typeWidening. Features are listed in a fixed order so that an
// unchanged table never logs a new protocol action.
func protocolFor(t workspace.Table) *deltaProtocol {
	var features []string
	for _, c := range t.Columns {
		if c.Type.Contains(typemap.TimestampNTZ) {
			features = append(features, "timestampNtz")
			break
		}
	}
	// VARIANT columns need the variantType reader and writer feature (Delta
	// PROTOCOL.md, "Variant Data Type").
	for _, c := range t.Columns {
		if c.Type.Contains(typemap.Variant) {
			features = append(features, "variantType")
			break
		}
	}
	if t.PropertyTrue(workspace.PropDeletionVectors) {
		features = append(features, "deletionVectors")
	}
	if t.PropertyTrue(workspace.PropTypeWidening) {
		features = append(features, "typeWidening")
	}
	if len(features) > 0 {
		return &deltaProtocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: features, WriterFeatures: features}
	}
	return &deltaProtocol{MinReaderVersion: 1, MinWriterVersion: 2}
}

// metaDataFor renders the table's Delta metaData. Properties that describe
// how data files are laid out (column mapping, UniForm, protocol versions)
// are left out: the emulator writes plain files with physical names equal to
// column names, and claiming otherwise would make readers misread them.
func metaDataFor(t workspace.Table) *deltaMetaData {
	conf := map[string]string{}
	for k, v := range t.Properties {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "delta.columnmapping.") || strings.HasPrefix(lk, "delta.universalformat.") ||
			strings.HasPrefix(lk, "delta.enableicebergcompat") || strings.HasPrefix(lk, "delta.feature.") ||
			lk == "delta.minreaderversion" || lk == "delta.minwriterversion" {
			continue
		}
		conf[k] = v
	}
	return &deltaMetaData{
		ID:               t.TableID,
		Description:      t.Comment,
		Format:           deltaFormat{Provider: "parquet", Options: map[string]string{}},
		SchemaString:     typemap.SchemaString(t.Columns),
		PartitionColumns: []string{},
		Configuration:    conf,
		CreatedTime:      t.CreatedAt.UnixMilli(),
	}
}

// readRows reads up to limit rows (limit <= 0: all) from the live files, in
// commit order, as JSON-ready maps keyed by column name. Columns of the table
// a file lacks read as null.
func (ts *tableStore) readRows(cols []typemap.Column, limit int) ([]map[string]any, error) {
	ts.mu.Lock()
	files := append([]string(nil), ts.files...)
	ts.mu.Unlock()
	var out []map[string]any
	for _, f := range files {
		if limit > 0 && len(out) >= limit {
			break
		}
		rows, err := readParquetRows(filepath.Join(ts.dir, f), cols, limit-len(out), limit > 0)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		out = append(out, rows...)
	}
	return out, nil
}

func readParquetRows(path string, cols []typemap.Column, max int, limited bool) ([]map[string]any, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	tbl, err := pqarrow.ReadTable(context.Background(), fh, parquet.NewReaderProperties(memory.DefaultAllocator), pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	types := make(map[string]typemap.Type, len(cols))
	for _, c := range cols {
		types[c.Name] = c.Type
	}
	tr := array.NewTableReader(tbl, 64<<10)
	defer tr.Release()
	var out []map[string]any
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			if limited && len(out) >= max {
				return out, nil
			}
			row := make(map[string]any, len(cols))
			for _, c := range cols {
				row[c.Name] = nil
			}
			for j, f := range rec.Schema().Fields() {
				if t, ok := types[f.Name]; ok {
					row[f.Name] = typedJSON(rec.Column(j), i, t)
				} else {
					row[f.Name] = jsonValue(rec.Column(j), i)
				}
			}
			out = append(out, row)
		}
	}
	return out, tr.Err()
}
