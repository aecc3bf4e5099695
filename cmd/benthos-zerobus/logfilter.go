package main

import (
	"bytes"
	"io"
	"os"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
)

// stdoutFilter stands between the process and its standard output, where
// Benthos writes its log: it copies everything through, leaving out only
// the engine's "Output type zerobus is now active" line of a zerobus output
// that stops before it ever connected. Benthos v4.60 logs that line whenever
// an output's Connect first returns nil, and such an output returns nil at
// shutdown only to hand its held batches back (zerobus.TakeEngineActiveLine
// counts those); read in the log of an outage, the line would say the output
// connected when it never did. Every other line passes unchanged, at once:
// what one read of the pipe returns is written before the next read, and a
// line is looked at only when that read holds the engine's text.
type stdoutFilter struct {
	real io.Writer // the process's standard output
	w    *os.File  // os.Stdout while the filter runs
	done chan struct{}
	take func() bool // zerobus.TakeEngineActiveLine
}

// filterStdout replaces os.Stdout by the filter's pipe. It must run before
// anything takes os.Stdout (the Benthos CLI takes it when it starts).
func filterStdout() (*stdoutFilter, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	f := &stdoutFilter{real: os.Stdout, w: w, done: make(chan struct{}), take: zerobus.TakeEngineActiveLine}
	os.Stdout = w
	go f.copy(r)
	return f, nil
}

// engineActive is the engine's line as its two log formats write it
// (logfmt, json). The output's own warning quotes the text escaped (\"…\"),
// so it never matches.
var engineActive = [][]byte{
	[]byte(`msg="` + zerobus.EngineActiveLine + `"`),
	[]byte(`"msg":"` + zerobus.EngineActiveLine + `"`),
}

func isEngineActive(line []byte) bool {
	for _, a := range engineActive {
		if bytes.Contains(line, a) {
			return true
		}
	}
	return false
}

func (f *stdoutFilter) copy(r *os.File) {
	defer close(f.done)
	defer r.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// write copies p to the real standard output, less the lines to leave out.
// A log line is one write of the logger, so a read holds it whole.
func (f *stdoutFilter) write(p []byte) {
	if !bytes.Contains(p, []byte(zerobus.EngineActiveLine)) {
		_, _ = f.real.Write(p)
		return
	}
	for len(p) > 0 {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line = p[:i+1]
		}
		p = p[len(line):]
		if isEngineActive(line) && f.take() {
			continue
		}
		_, _ = f.real.Write(line)
	}
}

// close restores os.Stdout and waits (a second at most: a child process may
// have been given the pipe) until everything written has been copied.
func (f *stdoutFilter) close(real *os.File) {
	os.Stdout = real
	_ = f.w.Close()
	select {
	case <-f.done:
	case <-time.After(time.Second):
	}
}
