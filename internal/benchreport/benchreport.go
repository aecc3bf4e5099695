// Package benchreport prints a benchmark's figure next to its target, as
// one line that `make bench` collects into a closing summary, so every ratio
// the project promises is printed with its target and with its range over
// the runs that produced it.
//
// A line reads:
//
//	TARGET pipeline/x_vs_drop median 0.93 range 0.90..0.95 over 3 runs, target >= 0.90: met
//
// It is used only by benchmarks; it imports nothing of the project.
package benchreport

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Out is where lines go; stdout, which `go test -bench` passes through.
var Out io.Writer = os.Stdout

// Direction says which side of the target meets it.
type Direction int

const (
	// AtLeast: the figure meets its target when it is >= the target.
	AtLeast Direction = iota
	// AtMost: the figure meets its target when it is <= the target.
	AtMost
	// Info: the figure has no target; it is printed for the record.
	Info
)

// Median of samples (the mean of the two middle ones for an even count);
// 0 for none.
func Median(samples []float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Report prints name's median over samples, their range, and whether the
// median meets target in direction dir, and returns the median. unit is
// appended to the numbers ("", "MiB", "ms", ...).
func Report(name string, samples []float64, dir Direction, target float64, unit string) float64 {
	m := Median(samples)
	var b strings.Builder
	fmt.Fprintf(&b, "TARGET %s median %s", name, num(m, unit))
	if len(samples) > 1 {
		fmt.Fprintf(&b, " range %s..%s over %d runs", num(slices.Min(samples), unit), num(slices.Max(samples), unit), len(samples))
	} else {
		b.WriteString(" (1 run)")
	}
	switch dir {
	case AtLeast:
		fmt.Fprintf(&b, ", target >= %s: %s", num(target, unit), verdict(m >= target))
	case AtMost:
		fmt.Fprintf(&b, ", target <= %s: %s", num(target, unit), verdict(m <= target))
	default:
		b.WriteString(", no target")
	}
	fmt.Fprintln(Out, b.String())
	return m
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

func num(v float64, unit string) string {
	var s string
	switch {
	case v != 0 && (v >= 1e5 || v < 0.01 && v > -0.01):
		s = fmt.Sprintf("%.3g", v)
	case v >= 100:
		s = fmt.Sprintf("%.0f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}
