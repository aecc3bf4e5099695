package ingest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAckClockNamesTheAckThatCoveredARow(t *testing.T) {
	var c ackClock
	t0 := time.Unix(1000, 0)
	_, ok := c.at(1)
	assert.False(t, ok, "nothing durable yet")
	c.record(3, t0)
	c.record(10, t0.Add(time.Second))

	for row, want := range map[uint64]time.Time{1: t0, 3: t0, 4: t0.Add(time.Second), 10: t0.Add(time.Second)} {
		got, ok := c.at(row)
		require.True(t, ok, "row %d", row)
		assert.Equal(t, want, got, "row %d", row)
	}
	_, ok = c.at(11)
	assert.False(t, ok, "row 11 is not durable")
	_, ok = c.at(0)
	assert.False(t, ok, "row 0 needs no ack")

	// Past the ring, an old row's ack is forgotten rather than misdated.
	for i := range ackClockSize {
		c.record(uint64(11+i), t0.Add(time.Duration(2+i)*time.Second))
	}
	_, ok = c.at(3)
	assert.False(t, ok, "the ack covering row 3 is older than the ring")
	got, ok := c.at(uint64(10 + ackClockSize))
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Duration(1+ackClockSize)*time.Second), got)
	_, ok = c.at(11)
	assert.False(t, ok, "the oldest ack held reached 11, but an older one may have")
	_, ok = c.at(12) // the ring still holds the ack before 12's: 12's is known
	assert.True(t, ok)
}
