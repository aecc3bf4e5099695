package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// httpHandler routes the workspace URL: discovery and OAuth, the emulator's
// read-back and admin API, and everything else to the UC/SQL handler of
// package workspace.
func (s *Server) httpHandler() http.Handler {
	wsHandler := s.ws.Handler()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/databricks-config", s.handleDatabricksConfig)
	mux.HandleFunc("GET /oidc/.well-known/oauth-authorization-server", s.handleOAuthMetadata)
	mux.HandleFunc("POST /oidc/v1/token", s.handleToken)
	mux.HandleFunc("GET /emulator/v1/tables", s.handleListTables)
	mux.HandleFunc("GET /emulator/v1/tables/{name}", s.handleTableInfo)
	mux.HandleFunc("GET /emulator/v1/tables/{name}/rows", s.handleTableRows)
	mux.HandleFunc("GET /emulator/v1/faults", s.handleGetFaults)
	mux.HandleFunc("PUT /emulator/v1/faults", s.handlePutFaults)
	mux.HandleFunc("GET /emulator/v1/stats", s.handleStats)
	mux.HandleFunc("GET /emulator/v1/grants", s.handleGetGrants)
	mux.HandleFunc("PATCH /emulator/v1/grants", s.handlePatchGrants)
	mux.HandleFunc("GET /emulator/v1/health", s.handleHealth)
	s.registerIcebergREST(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == "/api/2.0/sql/statements" {
			s.stats.add(&s.stats.statements, 1)
		}
		wsHandler.ServeHTTP(w, r)
	})
	return s.guardAdmin(mux)
}

// baseURL is the workspace URL as the client reached it, for the URLs the
// discovery documents advertise.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

func (s *Server) handleDatabricksConfig(w http.ResponseWriter, r *http.Request) {
	workspace.WriteJSON(w, http.StatusOK, map[string]any{
		"oidc_endpoint": baseURL(r) + "/oidc",
		"workspace_id":  s.cfg.WorkspaceID,
		"host":          baseURL(r),
	})
}

func (s *Server) handleOAuthMetadata(w http.ResponseWriter, r *http.Request) {
	base := baseURL(r) + "/oidc"
	workspace.WriteJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base,
		"authorization_endpoint":                base + "/v1/authorize",
		"token_endpoint":                        base + "/v1/token",
		"grant_types_supported":                 []string{"client_credentials"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"response_types_supported":              []string{"code"},
		"scopes_supported":                      []string{"all-apis"},
	})
}

// tableInfo is the read-back description of a table.
type tableInfo struct {
	FullName string       `json:"full_name"`
	RowCount int64        `json:"row_count"`
	Version  int64        `json:"version"`
	Columns  []columnInfo `json:"columns"`
}

type columnInfo struct {
	Name     string `json:"name"`
	TypeText string `json:"type_text"`
	TypeName string `json:"type_name"`
	Nullable bool   `json:"nullable"`
	Position int    `json:"position"`
}

func (s *Server) tableInfo(t workspace.Table) (tableInfo, error) {
	n, err := s.TableRowCount(t.FullName)
	if err != nil {
		return tableInfo{}, err
	}
	info := tableInfo{FullName: t.FullName, RowCount: n, Version: t.Version, Columns: []columnInfo{}}
	for i, c := range t.Columns {
		info.Columns = append(info.Columns, columnInfo{Name: c.Name, TypeText: c.Type.Text(), TypeName: string(c.Type.Kind), Nullable: c.Nullable, Position: i})
	}
	return info, nil
}

func (s *Server) handleTableInfo(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	t, ok := s.reg.Get(name)
	if !ok {
		workspace.WriteError(w, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", "Table '"+name+"' does not exist.")
		return
	}
	info, err := s.tableInfo(t)
	if err != nil {
		workspace.WriteError(w, http.StatusInternalServerError, "INTERNAL_ERROR", err.Error())
		return
	}
	workspace.WriteJSON(w, http.StatusOK, info)
}

// handleListTables is GET /emulator/v1/tables: every table with its count.
func (s *Server) handleListTables(w http.ResponseWriter, _ *http.Request) {
	out := []tableInfo{}
	for _, t := range s.reg.List() {
		info, err := s.tableInfo(t)
		if err != nil {
			workspace.WriteError(w, http.StatusInternalServerError, "INTERNAL_ERROR", err.Error())
			return
		}
		out = append(out, info)
	}
	workspace.WriteJSON(w, http.StatusOK, map[string]any{"tables": out})
}

func (s *Server) handleTableRows(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	limit := 1000
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			workspace.WriteError(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "limit must be an integer")
			return
		}
		limit = n
	}
	rows, err := s.TableRows(name, limit)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		workspace.WriteError(w, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", "Table '"+name+"' does not exist.")
		return
	case err != nil:
		workspace.WriteError(w, http.StatusInternalServerError, "INTERNAL_ERROR", err.Error())
		return
	}
	if rows == nil {
		rows = []map[string]any{}
	}
	workspace.WriteJSON(w, http.StatusOK, rows)
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	workspace.WriteJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		workspace.WriteError(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", err.Error())
		return
	}
	var f Faults
	if err := json.Unmarshal(body, &f); err != nil {
		workspace.WriteError(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", err.Error())
		return
	}
	if err := s.SetFaults(f); err != nil {
		workspace.WriteError(w, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", err.Error())
		return
	}
	s.log.Info("faults changed", "faults", string(body))
	workspace.WriteJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	workspace.WriteJSON(w, http.StatusOK, s.Stats())
}
