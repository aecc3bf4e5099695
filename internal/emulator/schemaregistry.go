package emulator

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// schemaRegistry is the emulator's embedded Confluent Schema Registry:
// franz-go's srfake (github.com/twmb/franz-go/pkg/sr/srfake), an
// independent in-memory implementation of the registry's REST API, on the
// --schema-registry listener. Like the Kafka broker it emulates no
// Databricks service and makes no claim about one: it is there so that a
// registry-framed topic runs locally with nothing installed. Its schemas are
// saved under the data directory after every change and seeded again at
// start, with their ids, subjects and versions, so that records kept by the
// Kafka broker still decode after a restart.
type schemaRegistry struct {
	reg  *srfake.Registry
	srv  *http.Server
	url  string
	path string
	log  *slog.Logger
	mu   sync.Mutex // serialises saves
}

// schemaRegistryFile is where the registry's schemas are kept, beside the
// tables (a name with a dot never collides with a catalog directory).
func schemaRegistryFile(dataDir string) string {
	return filepath.Join(dataDir, ".schema-registry.json")
}

// startSchemaRegistry serves a registry on ln (already bound), seeded from
// path, with TLS when tlsConf is set.
func startSchemaRegistry(ln net.Listener, path string, tlsConf *tls.Config, log *slog.Logger) (*schemaRegistry, error) {
	r := &schemaRegistry{reg: srfake.NewRegistry(), path: path, log: log}
	if err := r.load(); err != nil {
		ln.Close()
		return nil, fmt.Errorf("emulator: schema registry (--schema-registry): %s: %w (move it away to start with an empty registry)", path, err)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	r.url = scheme + "://" + ln.Addr().String()
	r.srv = &http.Server{Handler: r.handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf.Clone(),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		serve := r.srv.Serve
		if tlsConf != nil {
			serve = func(ln net.Listener) error { return r.srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("schema registry server stopped", "err", err)
		}
	}()
	return r, nil
}

// handler is srfake's, saving the registry after every request that may
// have changed it.
func (r *schemaRegistry) handler() http.Handler {
	h := r.reg.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req)
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			if err := r.save(); err != nil {
				r.log.Error("schema registry: saving the schemas failed; they will be lost at restart", "path", r.path, "err", err)
			}
		}
	})
}

// savedSchemas reads every schema version through the registry's own
// GET /schemas (srfake exports no listing).
func (r *schemaRegistry) savedSchemas() ([]sr.SubjectSchema, error) {
	rec := httptest.NewRecorder()
	r.reg.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/schemas", nil))
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /schemas: HTTP %d: %s", rec.Code, rec.Body.String())
	}
	var all []sr.SubjectSchema
	if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
		return nil, fmt.Errorf("GET /schemas: %w", err)
	}
	return all, nil
}

// save writes every schema version to path, atomically and fsync'd.
func (r *schemaRegistry) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	all, err := r.savedSchemas()
	if err != nil {
		return err
	}
	b, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return workspace.WriteFileAtomic(filepath.Dir(r.path), filepath.Base(r.path), b, "save schemas")
}

// load seeds the registry from path, when it exists: each id's first
// version in id order, so that a schema's references (registered before
// it) are there first; then the versions that reuse an id under another
// subject, which SeedSchema refuses (one id, one seed) and RegisterSchema
// numbers highest+1 in their subject, in (subject, version) order, so that
// they come after the subject's own earlier versions and keep their number.
// (Only a subject whose copy of another's schema predates its own versions
// gets a higher number back; the id, what a record carries, is kept.)
func (r *schemaRegistry) load() (err error) {
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var all []sr.SubjectSchema
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	defer func() {
		if p := recover(); p != nil { // SeedSchema panics on what it refuses
			err = fmt.Errorf("%v", p)
		}
	}()
	seeded := map[int]bool{}
	var reused []sr.SubjectSchema
	for _, s := range all {
		if seeded[s.ID] {
			reused = append(reused, s)
			continue
		}
		r.reg.SeedSchema(s.Subject, s.Version, s.ID, s.Schema)
		seeded[s.ID] = true
	}
	sort.SliceStable(reused, func(i, j int) bool {
		if reused[i].Subject != reused[j].Subject {
			return reused[i].Subject < reused[j].Subject
		}
		return reused[i].Version < reused[j].Version
	})
	for _, s := range reused {
		// The same schema under a second subject keeps its id.
		if _, _, err := r.reg.RegisterSchema(s.Subject, s.Schema); err != nil {
			return fmt.Errorf("subject %s version %d: %w", s.Subject, s.Version, err)
		}
	}
	return nil
}

// close stops serving; the schemas are saved already.
func (r *schemaRegistry) close() error { return r.srv.Close() }
