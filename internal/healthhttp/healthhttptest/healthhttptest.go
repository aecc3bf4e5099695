// Package healthhttptest reads the zerobus health endpoint
// (healthhttp.Path) for tests, as a monitoring probe would.
package healthhttptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
)

// Fetch GETs the report at url and decodes it. It never fails a test, so a
// require.Eventually condition can call it: until the engine has built the
// outputs and mounted the handler the answer is a 404 that is no report,
// which is an error naming the status and body.
func Fetch(url string) (int, healthhttp.Report, error) {
	var rep healthhttp.Report
	resp, err := http.Get(url)
	if err != nil {
		return 0, rep, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, rep, err
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return resp.StatusCode, rep, fmt.Errorf("HTTP %d, body %q: %w", resp.StatusCode, body, err)
	}
	return resp.StatusCode, rep, nil
}

// Get is Fetch for the test goroutine: it fails tb when there is no report.
// Pollers call Fetch.
func Get(tb testing.TB, url string) (int, healthhttp.Report) {
	tb.Helper()
	code, rep, err := Fetch(url)
	if err != nil {
		tb.Fatalf("health report at %s: %v", url, err)
	}
	return code, rep
}
