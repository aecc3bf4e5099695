package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Unity Catalog grants of the Zerobus writer, per service principal.
//
// What the service does: a Zerobus writer needs USE CATALOG on the catalog,
// USE SCHEMA on the schema and SELECT and MODIFY on the table (the three
// unity_catalog_privileges entries every official SDK puts in the token
// request's authorization_details, rust/sdk/src/default_token_factory.rs; the
// docs' "grant privileges to the table" step). The token endpoint mints the
// table-scoped token; a writer lacking a privilege is refused when it opens
// the stream, with PERMISSION_DENIED ("PermissionDenied - If credentials lack
// required permissions" in the create_stream docs of rust/sdk/src/lib.rs; the
// SDKs treat it as non-retryable after one token refresh, errors.rs). The
// text follows Unity Catalog's form, "User does not have USE SCHEMA on Schema
// 'cat.sch'", naming the missing privilege and securable. Privileges
// inherited from the catalog or schema have been reported insufficient for
// Zerobus (SELECT and MODIFY granted on the catalog do not let the writer
// in; docs/protocol.md#authentication: explicit USE CATALOG, USE SCHEMA, and
// SELECT + MODIFY on the table, inherited grants reported insufficient — a
// report, not a documented rule, so this is the stricter reading), so only privileges
// granted on the table itself count for SELECT and MODIFY; ALL PRIVILEGES
// on the exact securable counts, as Unity Catalog expands it at check time.
//
// The emulator's default is open (every principal may write everything),
// which keeps the zero Config usable; strict mode enforces the rule above.

// Privileges and securable types the Zerobus writer needs.
const (
	PrivUseCatalog    = "USE CATALOG"
	PrivUseSchema     = "USE SCHEMA"
	PrivSelect        = "SELECT"
	PrivModify        = "MODIFY"
	PrivAllPrivileges = "ALL PRIVILEGES"

	SecurableCatalog = "CATALOG"
	SecurableSchema  = "SCHEMA"
	SecurableTable   = "TABLE"

	GrantsOpen   = "open"
	GrantsStrict = "strict"
)

var securableDepth = map[string]int{SecurableCatalog: 1, SecurableSchema: 2, SecurableTable: 3}

// Grant lists privileges of one principal on one securable.
type Grant struct {
	Principal     string   `json:"principal"`
	SecurableType string   `json:"securable_type"`
	FullName      string   `json:"full_name"`
	Privileges    []string `json:"privileges"`
}

// GrantChange adds and removes privileges of one principal on one
// securable; it is one entry of PATCH /emulator/v1/grants, shaped like a
// change of Unity Catalog's PATCH /api/2.1/unity-catalog/permissions.
type GrantChange struct {
	Principal     string   `json:"principal"`
	SecurableType string   `json:"securable_type"`
	FullName      string   `json:"full_name"`
	Add           []string `json:"add,omitempty"`
	Remove        []string `json:"remove,omitempty"`
}

// GrantsConfig is the initial grant model.
type GrantsConfig struct {
	// Strict enforces grants at stream open; false lets every principal
	// write every table.
	Strict bool
	// Grants are the privileges held at start.
	Grants []Grant
}

type grantKey struct{ principal, securable, name string }

type grantStore struct {
	mu     sync.Mutex
	strict bool
	privs  map[grantKey]map[string]bool
}

func newGrantStore(cfg GrantsConfig) (*grantStore, error) {
	g := &grantStore{strict: cfg.Strict, privs: map[grantKey]map[string]bool{}}
	for _, gr := range cfg.Grants {
		if err := g.apply(GrantChange{Principal: gr.Principal, SecurableType: gr.SecurableType, FullName: gr.FullName, Add: gr.Privileges}); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// normalizeChange validates a change and canonicalizes its names.
func normalizeChange(c GrantChange) (grantKey, []string, []string, error) {
	st := strings.ToUpper(strings.TrimSpace(c.SecurableType))
	depth, ok := securableDepth[st]
	if !ok {
		return grantKey{}, nil, nil, fmt.Errorf("securable_type %q: want CATALOG, SCHEMA or TABLE", c.SecurableType)
	}
	if strings.TrimSpace(c.Principal) == "" {
		return grantKey{}, nil, nil, fmt.Errorf("%s %s: principal is empty", st, c.FullName)
	}
	parts := strings.Split(c.FullName, ".")
	if len(parts) != depth || slices.Contains(parts, "") {
		return grantKey{}, nil, nil, fmt.Errorf("%s full_name %q: want %d non-empty dot-separated parts", st, c.FullName, depth)
	}
	norm := func(list []string) ([]string, error) {
		out := make([]string, 0, len(list))
		for _, p := range list {
			p = strings.ToUpper(strings.Join(strings.Fields(p), " "))
			switch p {
			case PrivUseCatalog, PrivUseSchema, PrivSelect, PrivModify, PrivAllPrivileges:
			default:
				return nil, fmt.Errorf("privilege %q: want one of USE CATALOG, USE SCHEMA, SELECT, MODIFY, ALL PRIVILEGES", p)
			}
			out = append(out, p)
		}
		return out, nil
	}
	add, err := norm(c.Add)
	if err != nil {
		return grantKey{}, nil, nil, fmt.Errorf("%s %s: %w", st, c.FullName, err)
	}
	remove, err := norm(c.Remove)
	if err != nil {
		return grantKey{}, nil, nil, fmt.Errorf("%s %s: %w", st, c.FullName, err)
	}
	return grantKey{principal: strings.TrimSpace(c.Principal), securable: st, name: strings.ToLower(c.FullName)}, add, remove, nil
}

func (g *grantStore) apply(changes ...GrantChange) error {
	type norm struct {
		k           grantKey
		add, remove []string
	}
	all := make([]norm, 0, len(changes))
	for _, c := range changes {
		k, add, remove, err := normalizeChange(c)
		if err != nil {
			return err
		}
		all = append(all, norm{k, add, remove})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range all {
		set := g.privs[c.k]
		if set == nil {
			set = map[string]bool{}
			g.privs[c.k] = set
		}
		for _, p := range c.add {
			set[p] = true
		}
		for _, p := range c.remove {
			delete(set, p)
		}
		if len(set) == 0 {
			delete(g.privs, c.k)
		}
	}
	return nil
}

// dropTable forgets every grant on the table securable name (lower-cased):
// a table created again under the name starts with none.
func (g *grantStore) dropTable(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.privs {
		if k.securable == SecurableTable && k.name == name {
			delete(g.privs, k)
		}
	}
}

func (g *grantStore) setStrict(strict bool) {
	g.mu.Lock()
	g.strict = strict
	g.mu.Unlock()
}

// snapshot lists the grants, sorted, and the mode.
func (g *grantStore) snapshot() (string, []Grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	mode := GrantsOpen
	if g.strict {
		mode = GrantsStrict
	}
	out := make([]Grant, 0, len(g.privs))
	for k, set := range g.privs {
		privs := make([]string, 0, len(set))
		for p := range set {
			privs = append(privs, p)
		}
		sort.Strings(privs)
		out = append(out, Grant{Principal: k.principal, SecurableType: k.securable, FullName: k.name, Privileges: privs})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Principal != b.Principal {
			return a.Principal < b.Principal
		}
		if a.FullName != b.FullName {
			return a.FullName < b.FullName
		}
		return a.SecurableType < b.SecurableType
	})
	return mode, out
}

// check returns PERMISSION_DENIED naming the first privilege principal lacks
// to write table (in the order Unity Catalog resolves a name: catalog,
// schema, table), or nil. Open mode allows everything.
func (g *grantStore) check(principal, table string) error {
	cat, sch, tbl, err := typemap.ParseTableName(workspace.NormalizeName(table))
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.strict {
		return nil
	}
	has := func(securable, name, priv string) bool {
		set := g.privs[grantKey{principal, securable, name}]
		return set[priv] || set[PrivAllPrivileges]
	}
	need := []struct{ securable, label, name, priv string }{
		{SecurableCatalog, "Catalog", cat, PrivUseCatalog},
		{SecurableSchema, "Schema", cat + "." + sch, PrivUseSchema},
		{SecurableTable, "Table", cat + "." + sch + "." + tbl, PrivSelect},
		{SecurableTable, "Table", cat + "." + sch + "." + tbl, PrivModify},
	}
	for _, n := range need {
		if !has(n.securable, n.name, n.priv) {
			return status.Errorf(codes.PermissionDenied,
				"PERMISSION_DENIED: User does not have %s on %s '%s'. A Zerobus writer needs USE CATALOG, USE SCHEMA, and SELECT and MODIFY granted on the table itself (principal %s)",
				n.priv, n.label, n.name, principal)
		}
	}
	return nil
}

// grantsView is the body of GET /emulator/v1/grants.
type grantsView struct {
	Mode   string  `json:"mode"`
	Grants []Grant `json:"grants"`
}

// Grants returns the grant mode and the grants held.
func (s *Server) Grants() (mode string, grants []Grant) { return s.grants.snapshot() }

// UpdateGrants applies grant changes; they hold for every stream opened
// afterwards.
func (s *Server) UpdateGrants(changes ...GrantChange) error { return s.grants.apply(changes...) }

// SetGrantsStrict switches grant enforcement on (strict) or off (open).
func (s *Server) SetGrantsStrict(strict bool) { s.grants.setStrict(strict) }

func (s *Server) handleGetGrants(w http.ResponseWriter, _ *http.Request) {
	mode, grants := s.grants.snapshot()
	workspace.WriteJSON(w, http.StatusOK, grantsView{Mode: mode, Grants: grants})
}

// handlePatchGrants is PATCH /emulator/v1/grants: {"mode": "strict"|"open"}
// (optional) and {"changes": [GrantChange, …]}; all changes apply or none.
func (s *Server) handlePatchGrants(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Mode    string        `json:"mode"`
		Changes []GrantChange `json:"changes"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		workspace.WriteJSON(w, http.StatusBadRequest, map[string]string{"error_code": "INVALID_PARAMETER_VALUE", "message": "grants body: " + err.Error()})
		return
	}
	switch body.Mode {
	case "", GrantsOpen, GrantsStrict:
	default:
		workspace.WriteJSON(w, http.StatusBadRequest, map[string]string{"error_code": "INVALID_PARAMETER_VALUE", "message": fmt.Sprintf("mode %q: want open or strict", body.Mode)})
		return
	}
	if err := s.grants.apply(body.Changes...); err != nil {
		workspace.WriteJSON(w, http.StatusBadRequest, map[string]string{"error_code": "INVALID_PARAMETER_VALUE", "message": err.Error()})
		return
	}
	if body.Mode != "" {
		s.grants.setStrict(body.Mode == GrantsStrict)
	}
	s.log.Info("grants changed", "changes", len(body.Changes), "mode", body.Mode)
	s.handleGetGrants(w, r)
}

// parseGrantFlag parses --grant PRINCIPAL:TYPE:FULL_NAME:PRIV[,PRIV…], e.g.
// "emulator:TABLE:main.default.t:SELECT,MODIFY".
func parseGrantFlag(v string) (Grant, error) {
	parts := strings.SplitN(v, ":", 4)
	if len(parts) != 4 {
		return Grant{}, fmt.Errorf("--grant %q: want PRINCIPAL:TYPE:FULL_NAME:PRIV[,PRIV]", v)
	}
	g := Grant{Principal: parts[0], SecurableType: parts[1], FullName: parts[2], Privileges: strings.Split(parts[3], ",")}
	if _, _, _, err := normalizeChange(GrantChange{Principal: g.Principal, SecurableType: g.SecurableType, FullName: g.FullName, Add: g.Privileges}); err != nil {
		return Grant{}, fmt.Errorf("--grant %q: %w", v, err)
	}
	return g, nil
}
