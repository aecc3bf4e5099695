package benchreport

import (
	"bytes"
	"os"
	"testing"
)

func TestReport(t *testing.T) {
	var buf bytes.Buffer
	Out = &buf
	defer func() { Out = os.Stdout }()
	m := Report("pipeline/x_vs_drop", []float64{0.95, 0.88, 0.91}, AtLeast, 0.90, "")
	if m != 0.91 {
		t.Fatalf("median %v, want 0.91", m)
	}
	want := "TARGET pipeline/x_vs_drop median 0.91 range 0.88..0.95 over 3 runs, target >= 0.90: met\n"
	if buf.String() != want {
		t.Fatalf("got %q\nwant %q", buf.String(), want)
	}
	buf.Reset()
	Report("rss", []float64{300}, AtMost, 256, "MiB")
	if want := "TARGET rss median 300 MiB (1 run), target <= 256 MiB: NOT MET\n"; buf.String() != want {
		t.Fatalf("got %q\nwant %q", buf.String(), want)
	}
	if Median([]float64{1, 2, 3, 4}) != 2.5 || Median(nil) != 0 {
		t.Fatal("median of even count or none")
	}
}
