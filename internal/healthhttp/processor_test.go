package healthhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProcessorsAreReportedAndTheirStatusCounts(t *testing.T) {
	r := NewRegistry()
	status, problems := StatusUp, []string(nil)
	p := Processor{Type: "schema_registry_decode", Health: func() (string, []string) { return status, problems }}
	name, remove := r.AddProcessor("", p)
	if name != "schema_registry_decode" {
		t.Fatalf("name = %q", name)
	}
	if n2, _ := r.AddProcessor("", p); n2 != "schema_registry_decode#2" {
		t.Fatalf("second name = %q", n2)
	}
	get := func(label string) (int, Report) {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path+"?label="+label, nil))
		var rep Report
		if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return w.Code, rep
	}
	if code, rep := get(""); code != 200 || rep.Status != StatusUp || len(rep.Processors) != 2 {
		t.Fatalf("%d %+v", code, rep)
	}
	status, problems = StatusDown, []string{"schema registry http://127.0.0.1:1 unreachable for 31s"}
	code, rep := get("schema_registry_decode")
	if code != http.StatusServiceUnavailable || rep.Status != StatusDown || len(rep.Processors) != 1 ||
		rep.Processors[0].Problems[0] != problems[0] || rep.Processors[0].Type != "schema_registry_decode" {
		t.Fatalf("%d %+v", code, rep)
	}
	remove()
	if code, _ := get("schema_registry_decode"); code != http.StatusNotFound {
		t.Fatalf("after remove: %d", code)
	}
}
