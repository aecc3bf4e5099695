package kafkain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A partition's commit age counts from when its end was first seen past
// its commit (or from the commit's last move, if later): 0 at the end, 0
// before anything was consumed, and an idle partition's old commit is not
// stuck the moment a record arrives.
func TestCommitAge(t *testing.T) {
	t0 := time.Now()
	tp := TP{Topic: "t", Partition: 0}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// Committed an hour ago, idle since: at the end, age 0.
	st := PartitionState{TP: tp, Committed: 100, Durable: 100, FirstUnacked: -1, CommitMoved: at(-time.Hour)}
	var k commitClock
	assert.Zero(t, k.age(st, 100, t0), "at the end")
	// Records arrive: the age counts from now, not from the hour-old commit.
	assert.Zero(t, k.age(st, 150, at(0)), "the end just moved past the commit")
	assert.Equal(t, 90*time.Second, k.age(st, 150, at(90*time.Second)), "behind for 90 s, the commit still")
	// The commit moves, still behind the end: from the move.
	st.Committed, st.CommitMoved = 140, at(100*time.Second)
	assert.Equal(t, 20*time.Second, k.age(st, 160, at(120*time.Second)), "from the commit's move")
	// At the end again: 0, and the clock starts afresh next time.
	st.Committed = 160
	assert.Zero(t, k.age(st, 160, at(130*time.Second)))
	assert.Zero(t, k.age(st, 170, at(200*time.Second)))
	assert.Equal(t, 5*time.Second, k.age(st, 170, at(205*time.Second)))

	// Never committed: owed once records were fetched or acknowledged.
	fresh := PartitionState{TP: TP{Topic: "t", Partition: 1}, Committed: -1, Durable: -1, FirstUnacked: -1, CommitMoved: at(-time.Hour)}
	assert.Zero(t, k.age(fresh, 10, t0), "nothing consumed: nothing owed")
	fresh.FirstUnacked = 0
	assert.Zero(t, k.age(fresh, 10, at(time.Second)))
	assert.Equal(t, 4*time.Second, k.age(fresh, 10, at(5*time.Second)))

	// A partition no longer owned is forgotten.
	k.keep([]PartitionState{st})
	_, ok := k.since[fresh.TP]
	assert.False(t, ok)
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
