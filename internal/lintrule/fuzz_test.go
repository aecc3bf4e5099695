package lintrule_test

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/bloblang"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
)

// FuzzURLRuleMatchesRun: `lint` (the URL lint rule, run in Bloblang) and
// `run` (ingest.CheckURL) accept exactly the same endpoint and workspace
// URLs: issue 19 found http://127.1:… accepted by one and refused by the
// other. Seeds: testdata/fuzz/FuzzURLRuleMatchesRun and the URLs below.
func FuzzURLRuleMatchesRun(f *testing.F) {
	rule, err := bloblang.NewEnvironment().OnlyPure().Parse(lintrule.URL("endpoint"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"http://127.0.0.1:50051", "http://127.1:50051", "http://localhost:8080", "http://[::1]:8080",
		"http://[0:0:0:0:0:0:0:1]:1", "http://127.000.0.1", "https://dbc-1.cloud.databricks.com", "http://10.0.0.1",
		"HTTP://LOCALHOST", "http://localhost.:80", "http://:80", "ftp://127.0.0.1", "127.0.0.1:50051", "http://127.0.0.1%2f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		res, err := rule.Query(raw)
		if err != nil {
			t.Fatalf("lint rule on %q: %v", raw, err)
		}
		lints, ok := res.([]any)
		if !ok {
			t.Fatalf("lint rule on %q returned %T", raw, res)
		}
		_, runErr := ingest.CheckURL("endpoint", raw)
		if (len(lints) == 0) != (runErr == nil) {
			t.Fatalf("%q: lint says %v, run says %v", raw, lints, runErr)
		}
	})
}
