package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// Unity Catalog's Iceberg REST catalog: the read path of a table with
// Iceberg reads (UniForm), as documented in "Access Databricks tables from
// Apache Iceberg clients" (docs.databricks.com/external-access/iceberg: the
// endpoint /api/2.1/unity-catalog/iceberg-rest, the catalog as warehouse,
// credential vending) with the shapes of the Apache Iceberg REST catalog
// OpenAPI spec (open-api/rest-catalog-open-api.yaml: CatalogConfig,
// ListNamespacesResponse, GetNamespaceResponse, ListTablesResponse,
// LoadTableResult, IcebergErrorResponse). The catalog is read-only here, as
// UC's endpoint is for UniForm tables.
//
// Routes (prefix catalogs/<catalog>, from GET /v1/config?warehouse=<catalog>,
// as Unity Catalog answers it):
//
//	GET /api/2.1/unity-catalog/iceberg-rest/v1/config?warehouse=<catalog>
//	GET …/v1/catalogs/{catalog}/namespaces
//	GET …/v1/catalogs/{catalog}/namespaces/{namespace}
//	GET …/v1/catalogs/{catalog}/namespaces/{namespace}/tables
//	GET …/v1/catalogs/{catalog}/namespaces/{namespace}/tables/{table}
const icebergRESTPrefix = "/api/2.1/unity-catalog/iceberg-rest"

// icebergError writes the Iceberg REST ErrorModel.
func icebergError(w http.ResponseWriter, status int, typ, msg string) {
	workspace.WriteJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
}

func (s *Server) registerIcebergREST(mux *http.ServeMux) {
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			// The same OAuth bearer tokens as the workspace's other REST
			// APIs; an ingest (Zerobus) token is refused.
			if err := s.authorizeWorkspace(r); err != nil {
				icebergError(w, http.StatusUnauthorized, "NotAuthorizedException", "Credential was not sent or was of an unsupported type: "+err.Error())
				return
			}
			h(w, r)
		}
	}
	p := icebergRESTPrefix + "/v1"
	mux.HandleFunc("GET "+p+"/config", auth(s.handleIcebergConfig))
	mux.HandleFunc("GET "+p+"/catalogs/{catalog}/namespaces", auth(s.handleIcebergNamespaces))
	mux.HandleFunc("GET "+p+"/catalogs/{catalog}/namespaces/{namespace}", auth(s.handleIcebergNamespace))
	mux.HandleFunc("GET "+p+"/catalogs/{catalog}/namespaces/{namespace}/tables", auth(s.handleIcebergTables))
	mux.HandleFunc("GET "+p+"/catalogs/{catalog}/namespaces/{namespace}/tables/{table}", auth(s.handleIcebergLoadTable))
	mux.HandleFunc(p+"/", auth(func(w http.ResponseWriter, r *http.Request) {
		icebergError(w, http.StatusNotImplemented, "NotImplementedException",
			fmt.Sprintf("%s %s is not served: the emulator's Iceberg REST catalog is read-only (config, namespaces, tables, load table)", r.Method, r.URL.Path))
	}))
}

// icebergEndpoints are the routes advertised in the config response, so
// clients negotiating capabilities (Iceberg REST spec "endpoints") use no
// other.
var icebergEndpoints = []string{
	"GET /v1/{prefix}/namespaces",
	"GET /v1/{prefix}/namespaces/{namespace}",
	"GET /v1/{prefix}/namespaces/{namespace}/tables",
	"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
}

func (s *Server) handleIcebergConfig(w http.ResponseWriter, r *http.Request) {
	wh := r.URL.Query().Get("warehouse")
	if wh == "" {
		icebergError(w, http.StatusBadRequest, "BadRequestException", "the warehouse query parameter is required: set it to the Unity Catalog catalog name")
		return
	}
	if len(s.namespaces(wh)) == 0 {
		icebergError(w, http.StatusNotFound, "NoSuchCatalogException", fmt.Sprintf("Catalog '%s' does not exist.", wh))
		return
	}
	workspace.WriteJSON(w, http.StatusOK, map[string]any{
		"defaults":  map[string]string{},
		"overrides": map[string]string{"prefix": "catalogs/" + strings.ToLower(wh)},
		"endpoints": icebergEndpoints,
	})
}

// namespaces lists the schemas of catalog that hold tables.
func (s *Server) namespaces(catalog string) []string {
	seen := map[string]bool{}
	for _, t := range s.reg.List() {
		if strings.EqualFold(t.CatalogName(), catalog) {
			seen[t.SchemaName()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// namespace checks the {namespace} path segment: UC namespaces are one level
// (the schema), so a multi-level namespace (parts joined by 0x1F) is unknown.
func (s *Server) namespace(w http.ResponseWriter, r *http.Request) (catalog, ns string, ok bool) {
	catalog, ns = r.PathValue("catalog"), r.PathValue("namespace")
	for _, n := range s.namespaces(catalog) {
		if strings.EqualFold(n, ns) {
			return catalog, n, true
		}
	}
	icebergError(w, http.StatusNotFound, "NoSuchNamespaceException", fmt.Sprintf("Namespace does not exist: %s.%s", catalog, ns))
	return "", "", false
}

func (s *Server) handleIcebergNamespaces(w http.ResponseWriter, r *http.Request) {
	catalog := r.PathValue("catalog")
	if r.URL.Query().Get("parent") != "" {
		// One level of namespaces: nothing is nested in a schema.
		workspace.WriteJSON(w, http.StatusOK, map[string]any{"namespaces": [][]string{}})
		return
	}
	out := [][]string{}
	for _, n := range s.namespaces(catalog) {
		out = append(out, []string{n})
	}
	workspace.WriteJSON(w, http.StatusOK, map[string]any{"namespaces": out})
}

func (s *Server) handleIcebergNamespace(w http.ResponseWriter, r *http.Request) {
	if _, ns, ok := s.namespace(w, r); ok {
		workspace.WriteJSON(w, http.StatusOK, map[string]any{"namespace": []string{ns}, "properties": map[string]string{}})
	}
}

func (s *Server) handleIcebergTables(w http.ResponseWriter, r *http.Request) {
	catalog, ns, ok := s.namespace(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for _, t := range s.reg.List() {
		if strings.EqualFold(t.CatalogName(), catalog) && t.SchemaName() == ns {
			out = append(out, map[string]any{"namespace": []string{ns}, "name": t.Name()})
		}
	}
	workspace.WriteJSON(w, http.StatusOK, map[string]any{"identifiers": out})
}

// handleIcebergLoadTable answers LoadTableResult: the metadata at the
// table's converted Delta version and, when the client asks for
// X-Iceberg-Access-Delegation: vended-credentials, temporary S3 credentials
// for the table's location in config (the keys of iceberg's S3FileIO /
// iceberg-go io: s3.access-key-id, s3.secret-access-key, s3.session-token,
// s3.session-token-expires-at-ms, s3.endpoint, s3.path-style-access,
// client.region).
func (s *Server) handleIcebergLoadTable(w http.ResponseWriter, r *http.Request) {
	catalog, ns, ok := s.namespace(w, r)
	if !ok {
		return
	}
	full := catalog + "." + ns + "." + r.PathValue("table")
	t, found := s.reg.Get(full)
	if !found {
		icebergError(w, http.StatusNotFound, "NoSuchTableException", fmt.Sprintf("Table does not exist: %s", workspace.NormalizeName(full)))
		return
	}
	// Only tables with Iceberg reads (UniForm) have Iceberg metadata; UC's
	// endpoint serves no other Delta table.
	if !t.IcebergReads() {
		icebergError(w, http.StatusBadRequest, "BadRequestException",
			fmt.Sprintf("Table %s is not readable through Iceberg: enable Iceberg reads ('%s' = 'iceberg', with '%s' = 'true')", t.FullName, workspace.PropEnabledFormats, workspace.PropIcebergCompatV2))
		return
	}
	it, err := s.icebergTableOf(t)
	switch {
	case errors.Is(err, errNotConverted):
		icebergError(w, http.StatusNotFound, "NoSuchTableException", fmt.Sprintf("Table %s has no Iceberg metadata yet: its first Delta version is still being converted (run MSCK REPAIR TABLE %s SYNC METADATA to force it)", t.FullName, t.FullName))
		return
	case err != nil:
		icebergError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	config := map[string]string{}
	if delegationRequested(r.Header.Values("X-Iceberg-Access-Delegation"), "vended-credentials") {
		keyID, cred := s.s3creds.issue(t.TableID, s.cfg.CredentialTTL)
		config = map[string]string{
			"s3.access-key-id":               keyID,
			"s3.secret-access-key":           cred.secret,
			"s3.session-token":               cred.token,
			"s3.session-token-expires-at-ms": strconv.FormatInt(cred.expires.UnixMilli(), 10),
			"s3.endpoint":                    s.S3URL(),
			"s3.path-style-access":           "true",
			"client.region":                  s3Region,
		}
	}
	workspace.WriteJSON(w, http.StatusOK, map[string]any{
		"metadata-location": it.metadataLocation,
		"metadata":          json.RawMessage(it.raw),
		"config":            config,
	})
}

// delegationRequested reports whether the comma-separated header values
// name mode (Iceberg REST spec: X-Iceberg-Access-Delegation lists modes).
func delegationRequested(values []string, mode string) bool {
	for _, v := range values {
		for _, m := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(m), mode) {
				return true
			}
		}
	}
	return false
}
