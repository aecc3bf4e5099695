package kafkain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A partition's commit age is the time its commit has not moved while its
// end is past it: 0 at the end, 0 before anything was consumed, and the
// time since the commit (or the assignment) otherwise.
func TestCommitAge(t *testing.T) {
	now := time.Now()
	moved := now.Add(-90 * time.Second)
	for _, c := range []struct {
		name string
		s    PartitionState
		end  int64
		want time.Duration
	}{
		{"at the end", PartitionState{Committed: 100, Durable: 100, FirstUnacked: -1, CommitMoved: moved}, 100, 0},
		{"behind the end", PartitionState{Committed: 100, Durable: 100, FirstUnacked: -1, CommitMoved: moved}, 150, 90 * time.Second},
		{"records in flight", PartitionState{Committed: 100, Durable: 100, FirstUnacked: 100, CommitMoved: moved}, 120, 90 * time.Second},
		{"never committed, records fetched", PartitionState{Committed: -1, Durable: -1, FirstUnacked: 0, CommitMoved: moved}, 10, 90 * time.Second},
		{"never committed, nothing consumed", PartitionState{Committed: -1, Durable: -1, FirstUnacked: -1, CommitMoved: moved}, 10, 0},
		{"moved in the future (clock)", PartitionState{Committed: 1, Durable: 1, FirstUnacked: -1, CommitMoved: now.Add(time.Second)}, 10, 0},
	} {
		assert.Equal(t, c.want, commitAge(c.s, c.end, now), c.name)
	}
}

// Committed moves a partition's CommitMoved only when the offset moves.
func TestCommittedMovesCommitMoved(t *testing.T) {
	tr := NewTracker(Limits{MaxUnacked: 10, MaxUnackedBytes: 1 << 20}, false)
	tp := TP{Topic: "t", Partition: 0}
	tr.Assign([]TP{tp})
	assigned := tr.State()[0].CommitMoved
	assert.False(t, assigned.IsZero(), "the assignment starts the clock")
	time.Sleep(5 * time.Millisecond)
	tr.Committed(tp, 5)
	first := tr.State()[0].CommitMoved
	assert.True(t, first.After(assigned), "a commit that moves restarts it")
	time.Sleep(5 * time.Millisecond)
	tr.Committed(tp, 5)
	assert.Equal(t, first, tr.State()[0].CommitMoved, "the same offset again does not")
}
