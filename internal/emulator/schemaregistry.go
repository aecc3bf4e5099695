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
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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

// savedSchema is one schema version as kept in the file: the registry's
// own JSON of it, and whether it is soft-deleted, alone or with its whole
// subject. A soft delete hides a version from lookups by subject and
// version, but its id stays readable (GET /schemas/ids/{id}) and is never
// given to another schema, and its version number is never reused:
// Confluent's deletion guidelines, "On a soft delete, the API only deletes
// the version and the underlying schema ID would still be available for
// any lookup ... schema IDs are not reusable",
// https://docs.confluent.io/platform/current/schema-registry/schema-deletion-guidelines.html.
// So a soft-deleted version is saved, and deleted again at load: dropping
// it lost its id (records carrying it no longer decode after a restart)
// and let a new schema take its id and version number.
type savedSchema struct {
	sr.SubjectSchema
	// Deleted is a version soft-deleted by itself
	// (DELETE /subjects/{subject}/versions/{version}).
	Deleted bool `json:"deleted,omitempty"`
	// SubjectDeleted is a version of a soft-deleted subject
	// (DELETE /subjects/{subject}).
	SubjectDeleted bool `json:"subject_deleted,omitempty"`
}

// call makes one request of the registry's own REST API in-process (srfake
// exports no listing and no soft delete), decoding its answer into out.
func (r *schemaRegistry) call(method, path string, out any) error {
	rec := httptest.NewRecorder()
	r.reg.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, rec.Code, rec.Body.String())
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// savedSchemas reads every schema version, soft-deleted ones with what was
// deleted, through the registry's API: GET /schemas?deleted=true, the
// subjects' soft-deleted versions (?deletedOnly=true) and the soft-deleted
// subjects (GET /subjects?deletedOnly=true).
func (r *schemaRegistry) savedSchemas() ([]savedSchema, error) {
	var all []sr.SubjectSchema
	if err := r.call(http.MethodGet, "/schemas?deleted=true", &all); err != nil {
		return nil, err
	}
	var subjectsGone []string
	if err := r.call(http.MethodGet, "/subjects?deletedOnly=true", &subjectsGone); err != nil {
		return nil, err
	}
	goneSubject := map[string]bool{}
	for _, s := range subjectsGone {
		goneSubject[s] = true
	}
	gone := map[string]map[int]bool{} // subject -> its soft-deleted versions
	out := make([]savedSchema, 0, len(all))
	for _, s := range all {
		vs, ok := gone[s.Subject]
		if !ok {
			var list []int
			if err := r.call(http.MethodGet, "/subjects/"+url.PathEscape(s.Subject)+"/versions?deletedOnly=true", &list); err != nil {
				return nil, err
			}
			vs = map[int]bool{}
			for _, v := range list {
				vs[v] = true
			}
			gone[s.Subject] = vs
		}
		out = append(out, savedSchema{SubjectSchema: s, Deleted: vs[s.Version], SubjectDeleted: goneSubject[s.Subject]})
	}
	return out, nil
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
// Last, the soft deletions are made again (see savedSchema).
func (r *schemaRegistry) load() (err error) {
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var all []savedSchema
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
	var reused []savedSchema
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
	deleted := map[string]bool{} // "subject/version" deleted already
	for _, s := range reused {
		// A schema registered again after its version was soft-deleted
		// is a new version of the same id: RegisterSchema gives it only
		// once the earlier one is deleted, else it answers with that one.
		for _, e := range all {
			if e.Subject == s.Subject && e.Version < s.Version && e.Deleted && e.ID == s.ID {
				if err := r.softDelete(e, deleted); err != nil {
					return err
				}
			}
		}
		// The same schema under a second subject keeps its id.
		if _, _, err := r.reg.RegisterSchema(s.Subject, s.Schema); err != nil {
			return fmt.Errorf("subject %s version %d: %w", s.Subject, s.Version, err)
		}
	}
	return r.softDeleteAll(all, deleted)
}

// softDelete soft-deletes the version s, once (done records it).
func (r *schemaRegistry) softDelete(s savedSchema, done map[string]bool) error {
	key := s.Subject + "/" + strconv.Itoa(s.Version)
	if done[key] {
		return nil
	}
	if err := r.call(http.MethodDelete, "/subjects/"+url.PathEscape(s.Subject)+"/versions/"+strconv.Itoa(s.Version), nil); err != nil {
		return fmt.Errorf("soft-deleting subject %s version %d again: %w", s.Subject, s.Version, err)
	}
	done[key] = true
	return nil
}

// softDeleteAll makes the saved soft deletions again: the versions, then the
// subjects, referrers before what they reference (the registry refuses to
// delete a schema an undeleted one references): newest id first, the
// subjects in passes until none is left.
func (r *schemaRegistry) softDeleteAll(all []savedSchema, done map[string]bool) error {
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Deleted {
			if err := r.softDelete(all[i], done); err != nil {
				return err
			}
		}
	}
	var subjects []string
	seen := map[string]bool{}
	for i := len(all) - 1; i >= 0; i-- {
		if s := all[i].Subject; all[i].SubjectDeleted && !seen[s] {
			seen[s] = true
			subjects = append(subjects, s)
		}
	}
	for len(subjects) > 0 {
		var left []string
		var lastErr error
		for _, s := range subjects {
			if err := r.call(http.MethodDelete, "/subjects/"+url.PathEscape(s), nil); err != nil {
				left, lastErr = append(left, s), err
			}
		}
		if len(left) == len(subjects) {
			return fmt.Errorf("soft-deleting subjects %v again: %w", left, lastErr)
		}
		subjects = left
	}
	return nil
}

// close stops serving; the schemas are saved already.
func (r *schemaRegistry) close() error { return r.srv.Close() }
