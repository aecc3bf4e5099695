package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The filter passes everything through unchanged, reads that hold several
// lines or part of one included, and leaves out an engine "is now active"
// line only while the output side says one is due (once per never-connected
// output).
func TestStdoutFilterLeavesOutOnlyTheDueActiveLines(t *testing.T) {
	var out bytes.Buffer
	due := 1
	f := &stdoutFilter{real: &out, take: func() bool {
		if due > 0 {
			due--
			return true
		}
		return false
	}}
	active := `level=info msg="Output type zerobus is now active" @service=benthos-zerobus path=root.output` + "\n"
	f.write([]byte("level=info msg=\"Running main config\"\n"))
	f.write([]byte("a partial line, no newline yet"))
	warning := `level=warning msg="zerobus: stopping before table a.b.c ever connected: … An engine line \"Output type zerobus is now active\" after this one marks only that hand-back"` + "\n"
	f.write([]byte(" ends here\n" + warning + active + "after\n"))
	jsonActive := `{"level":"info","msg":"Output type zerobus is now active","path":"root.output"}` + "\n"
	due++
	f.write([]byte(jsonActive))
	f.write([]byte(active))                   // a second output, which connected: kept
	f.write([]byte("{\"id\":1}\n{\"id\":2}")) // data, a record without its newline
	assert.Equal(t, "level=info msg=\"Running main config\"\n"+
		"a partial line, no newline yet ends here\n"+
		warning+
		"after\n"+active+"{\"id\":1}\n{\"id\":2}", out.String())
	assert.Zero(t, due)
}
