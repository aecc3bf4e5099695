package kafkain

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// testClock is a clock whose waits pass at once: After moves it on by d.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// clockLog records each line with the test clock's time.
type clockLog struct {
	clock *testClock
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *clockLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
	l.at = append(l.at, l.clock.Now())
}

// connectLines returns, under the lock, the lines about connecting: the
// engine's and the connector's, without the group's (partitions assigned
// or revoked), which the consumer logs from its own goroutines once
// connected.
func (l *clockLog) connectLines() (lines []string, at []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, line := range l.lines {
		if !strings.Contains(line, "redpanda: partitions ") {
			lines, at = append(lines, line), append(at, l.at[i])
		}
	}
	return lines, at
}

func (l *clockLog) Debugf(string, ...any)          {}
func (l *clockLog) Infof(format string, v ...any)  { l.add("INFO", format, v...) }
func (l *clockLog) Warnf(format string, v ...any)  { l.add("WARN", format, v...) }
func (l *clockLog) Errorf(format string, v ...any) { l.add("ERROR", format, v...) }

// engine plays Benthos's input loop around Connect: it logs each error
// Connect returns ("Failed to connect to redpanda: …", as the engine
// does) and waits what the error asks before calling again.
func engine(t *testing.T, c *Connector, clock *testClock, log *clockLog) *Consumer {
	t.Helper()
	for range 1000 {
		cons, wait, err := c.Connect(context.Background())
		if err == nil {
			return cons
		}
		log.Errorf("Failed to connect to redpanda: %v", err)
		<-clock.After(wait)
	}
	t.Fatal("never connected")
	return nil
}

func closeConsumer(t *testing.T, cons *Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = cons.Close(ctx)
}

// TestHourOfWrongPasswordIsQuiet: the input's user does not exist on the
// broker (a wrong password looks the same: kfake closes the connection
// during the SCRAM exchange, like Redpanda) for an hour, on a test clock.
// From the fifth minute on at most 3 attempts fall in any minute; the
// hour logs 3 lines (the engine's, naming the cause, and two reminders),
// health says why all along, and once the user is created the next
// attempt connects, with one line saying so, without a restart.
func TestHourOfWrongPasswordIsQuiet(t *testing.T) {
	const topic = "orders"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin"))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()

	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.Now()
	log := &clockLog{clock: clock}
	cfg := Config{SeedBrokers: addrs, Topics: []string{topic}, Group: "g", StartOffset: kgo.NewOffset().AtStart(),
		SASL:      []sasl.Mechanism{scram.Auth{User: "alice", Pass: "s3cret"}.AsSha256Mechanism()},
		SASLUsers: []string{"alice"}}
	conn := NewConnector(cfg, log, nil, clock)
	var attempts []time.Time
	fixed := false
	var duringFault ConnectState
	conn.attempted = func() {
		attempts = append(attempts, clock.Now())
		if !fixed && clock.Now().Sub(start) >= time.Hour {
			duringFault = conn.State()
			createUser(t, addrs, "alice", "s3cret")
			fixed = true
		}
	}
	cons := engine(t, conn, clock, log)
	defer closeConsumer(t, cons)

	lines, at := log.connectLines()
	var faultLines []string
	for i, l := range lines {
		if at[i].Sub(start) < time.Hour {
			faultLines = append(faultLines, l)
		}
	}
	worst := 0
	for i, at := range attempts {
		if at.Sub(start) < 5*time.Minute {
			continue
		}
		n := 0
		for _, later := range attempts[i:] {
			if later.Sub(at) < time.Minute {
				n++
			}
		}
		worst = max(worst, n)
	}
	t.Logf("an hour of SASL refusals (test clock): %d attempts, worst minute after 5 min %d; %d lines during the fault, %d in all:", len(attempts), worst, len(faultLines), len(lines))
	for i, l := range lines {
		t.Logf("  +%s %s", at[i].Sub(start).Round(time.Second), l)
	}
	assert.LessOrEqual(t, worst, 3, "at most 3 attempts a minute after 5 minutes")
	assert.GreaterOrEqual(t, worst, 2, "still trying every half minute or so")
	assert.Len(t, faultLines, 3, "the hour's lines: the cause, then reminders at 10 and 30 minutes")
	require.NotEmpty(t, faultLines)
	assert.Contains(t, faultLines[0], "Failed to connect to redpanda: kafka input: SASL refused: the broker closed the connection during SASL authentication (SCRAM-SHA-256 as user alice): check the password/mechanism")
	for _, l := range faultLines[1:] {
		assert.Contains(t, l, "WARN redpanda: still cannot connect after")
		assert.Contains(t, l, "SASL refused")
	}
	assert.NotContains(t, strings.Join(lines, "\n"), "s3cret", "the password is never logged")
	require.NotNil(t, duringFault.Failing, "the state names the cause during the fault")
	assert.Equal(t, CauseSASL, duringFault.Failing.Cause)
	assert.False(t, duringFault.Connected)
	assert.Equal(t, len(attempts)-1, duringFault.Attempts, "every failed attempt is counted")

	last := lines[len(lines)-1]
	assert.Contains(t, last, "INFO redpanda: connected to")
	assert.Contains(t, last, "after failing for 1h0m")
	assert.Equal(t, 1, strings.Count(strings.Join(lines, "\n"), "connected to"), "one line for the recovery")
	assert.True(t, conn.State().Connected)
	assert.Nil(t, conn.State().Failing)
}

// TestTopicCreatedLater: an input started before its topic exists says so
// once, and reads the topic as soon as it is created, without a restart.
func TestTopicCreatedLater(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	log := &clockLog{clock: clock}
	cfg := Config{SeedBrokers: addrs, Topics: []string{"late"}, Group: "g-late", StartOffset: kgo.NewOffset().AtStart(), Limits: Limits{MaxUnacked: 100}}
	conn := NewConnector(cfg, log, nil, clock)
	n := 0
	conn.attempted = func() {
		if n++; n == 6 {
			adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			require.NoError(t, err)
			defer adm.Close()
			_, err = kadm.NewClient(adm).CreateTopic(context.Background(), 1, 1, nil, "late")
			require.NoError(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			require.NoError(t, err)
			defer cl.Close()
			require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "late", Value: []byte("x")}).FirstErr())
		}
	}
	cons := engine(t, conn, clock, log)
	defer closeConsumer(t, cons)
	lines, _ := log.connectLines()
	require.Len(t, lines, 2, "%q", lines)
	assert.Contains(t, lines[0], "kafka input: no such topic: topic late: the topic does not exist")
	assert.Contains(t, lines[1], "connected to")
	assert.Contains(t, lines[1], "(5 attempts; last cause: no such topic)")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cons.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, "x", string(cons.Handed(b)[0].Value))
	cons.Ack(b, b.Delivery(), nil)
}

// createUser creates a SCRAM-SHA-256 user as the superuser.
func createUser(t *testing.T, addrs []string, user, pass string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.SASL(scram.Auth{User: "admin", Pass: "admin"}.AsSha256Mechanism()))
	require.NoError(t, err)
	defer cl.Close()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(context.Background(), nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: pass}})
	require.NoError(t, err)
	require.NoError(t, res.Error())
}

// TestNewCauseIsLoggedAtOnce: a broker that is down, then up but refusing
// the user, then accepting it: each cause is the engine's line once, the
// attempts in between log nothing, and the success one line.
func TestNewCauseIsLoggedAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	log := &clockLog{clock: clock}
	cfg := Config{SeedBrokers: []string{addr}, Topics: []string{"orders"}, StartOffset: kgo.NewOffset().AtStart(),
		SASL:      []sasl.Mechanism{scram.Auth{User: "alice", Pass: "s3cret"}.AsSha256Mechanism()},
		SASLUsers: []string{"alice"}}
	conn := NewConnector(cfg, log, nil, clock)
	n := 0
	var c *kfake.Cluster
	conn.attempted = func() {
		switch n++; n {
		case 4: // the broker comes up, without the user
			c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, "orders"), kfake.EnableSASL(),
				kfake.Superuser("SCRAM-SHA-256", "admin", "admin"))
			require.NoError(t, err)
		case 8: // the user is created
			createUser(t, c.ListenAddrs(), "alice", "s3cret")
		}
	}
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	cons := engine(t, conn, clock, log)
	defer closeConsumer(t, cons)
	lines, _ := log.connectLines()
	require.Len(t, lines, 3, "%q", lines)
	assert.Contains(t, lines[0], "ERROR Failed to connect to redpanda: kafka input: connection refused: nothing accepts connections at "+addr)
	assert.Contains(t, lines[1], "ERROR Failed to connect to redpanda: kafka input: SASL refused")
	assert.Contains(t, lines[2], "INFO redpanda: connected to ["+addr+"]")
	assert.Contains(t, lines[2], "(7 attempts; last cause: SASL refused)")
}
