package schemaregistry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
)

// TestFaultOfAnHourIsThreeLines: a registry down for an hour, retried every
// 30 s (the back-off's most), is explained once and reminded at 10 and 30
// minutes, then one line when it heals.
func TestFaultOfAnHourIsThreeLines(t *testing.T) {
	var buf bytes.Buffer
	log := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &faultState{name: Name, url: "http://registry", now: func() time.Time { return now }}
	down := errors.New("schema registry http://registry answered HTTP 503")
	start := now
	for now.Sub(start) < time.Hour {
		f.set(log, down, retryMax)
		now = now.Add(retryMax)
	}
	f.clear(log)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	assert.Len(t, lines, 4, "%s", buf.String())
	assert.Contains(t, lines[0], "The batch is held")
	assert.Contains(t, lines[1], "still waiting for the schema registry after 10m0s")
	assert.Contains(t, lines[2], "still waiting for the schema registry after 30m0s")
	assert.Contains(t, lines[3], "answers again after 1h0m0s")
}
