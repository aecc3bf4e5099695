package workspace

import "time"

// icebergState tracks the asynchronous Iceberg (UniForm) conversion of one
// table. Delta versions count commits from 0 (the CREATE): a metadata change
// (registry Version moving) and a data commit (NoteDataCommit) each add one,
// so deltaVersion = (Version-1) + dataCommits.
type icebergState struct {
	dataCommits int64
	converted   int64     // newest converted Delta version; -1 = none yet
	convertedAt time.Time // commit time of that version
	pending     []commit  // commits not yet converted, oldest first
}

type commit struct {
	version int64
	at      time.Time
}

// state returns the conversion state of name, creating it (as fully
// converted: tables that predate this process are assumed caught up) on
// first use. Callers hold w.mu.
func (w *Workspace) state(name string, t Table) *icebergState {
	s, ok := w.iceberg[name]
	if !ok {
		s = &icebergState{converted: t.Version - 1, convertedAt: t.UpdatedAt}
		w.iceberg[name] = s
	}
	return s
}

// advance moves the conversion forward to every pending commit older than
// the lag, and records a commit for a registry change made outside this
// Workspace. Callers hold w.mu.
func (w *Workspace) advance(s *icebergState, t Table, now time.Time) {
	cur := t.Version - 1 + s.dataCommits
	last := s.converted
	if n := len(s.pending); n > 0 {
		last = s.pending[n-1].version
	}
	if cur > last {
		s.pending = append(s.pending, commit{version: cur, at: now})
	}
	for len(s.pending) > 0 && !s.pending[0].at.Add(w.opts.IcebergLag).After(now) {
		s.converted, s.convertedAt = s.pending[0].version, s.pending[0].at
		s.pending = s.pending[1:]
	}
}

// noteCreate starts the conversion state of a table created by SQL: its
// version 0 is not converted yet.
func (w *Workspace) noteCreate(name string) {
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.iceberg[name] = &icebergState{converted: -1, pending: []commit{{version: 0, at: now}}}
}

// noteCommit records that the registry version of name moved (a DDL change).
func (w *Workspace) noteCommit(name string) {
	t, ok := w.reg.Get(name)
	if !ok {
		return
	}
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state(name, Table{Version: t.Version - 1, UpdatedAt: t.UpdatedAt})
	w.advance(s, t, now)
}

// NoteDataCommit records one durable data commit (a Delta add commit) to the
// table fullName. The Zerobus side of the emulator calls it after each commit
// it has made durable; it moves the table's Delta version by one, which the
// Iceberg conversion then reports IcebergLag later (or at once after MSCK
// REPAIR TABLE … SYNC METADATA). Unknown tables are ignored.
func (w *Workspace) NoteDataCommit(fullName string) {
	name := NormalizeName(fullName)
	t, ok := w.reg.Get(name)
	if !ok {
		return
	}
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state(name, t)
	w.advance(s, t, now) // settle registry changes made before this commit
	s.dataCommits++
	w.advance(s, t, now)
}

// DeltaVersion returns the current Delta version of fullName:
// (registry Version - 1) + data commits noted since this process started.
func (w *Workspace) DeltaVersion(fullName string) (int64, bool) {
	name := NormalizeName(fullName)
	t, ok := w.reg.Get(name)
	if !ok {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state(name, t)
	return t.Version - 1 + s.dataCommits, true
}

// IcebergConverted returns the newest Delta version of fullName that the
// asynchronous Iceberg conversion has caught up with and that version's
// commit time. ok is false for an unknown table or one with no converted
// version yet.
func (w *Workspace) IcebergConverted(fullName string) (version int64, at time.Time, ok bool) {
	name := NormalizeName(fullName)
	t, found := w.reg.Get(name)
	if !found {
		return 0, time.Time{}, false
	}
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state(name, t)
	w.advance(s, t, now)
	if s.converted < 0 {
		return 0, time.Time{}, false
	}
	return s.converted, s.convertedAt, true
}

// forceIceberg converts every pending commit at once (MSCK REPAIR TABLE …
// SYNC METADATA).
func (w *Workspace) forceIceberg(name string) {
	t, ok := w.reg.Get(name)
	if !ok {
		return
	}
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state(name, t)
	w.advance(s, t, now)
	if n := len(s.pending); n > 0 {
		s.converted, s.convertedAt = s.pending[n-1].version, s.pending[n-1].at
		s.pending = nil
	}
}

// SeedDataCommits tells the workspace how many data commits fullName already
// has, for an emulator restarted on an existing data directory (data commit
// counts are not persisted by the Registry; the Delta log is their record).
// The seeded versions count as already converted to Iceberg. Unknown tables
// are ignored.
func (w *Workspace) SeedDataCommits(fullName string, n int64) {
	name := NormalizeName(fullName)
	t, ok := w.reg.Get(name)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.iceberg[name] = &icebergState{dataCommits: n, converted: t.Version - 1 + n, convertedAt: t.UpdatedAt}
}
