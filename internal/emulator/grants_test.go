package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// patchGrants calls PATCH /emulator/v1/grants and returns the status code
// and the grants view.
func patchGrants(t *testing.T, srv *Server, body any) (int, grantsView) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPatch, srv.HTTPURL()+"/emulator/v1/grants", bytes.NewReader(raw))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v grantsView
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	}
	return resp.StatusCode, v
}

// openStatus opens an Arrow stream on testTable and returns how the open
// ended (nil: ready), closing the stream again when it opened.
func openStatus(t *testing.T, srv *Server) error {
	t.Helper()
	p, _, err := openPut(t, dial(t, srv), zerobusToken(t, srv, testTable), testTable, testSchema)
	if err == nil {
		require.NoError(t, p.finish())
	}
	return err
}

func change(typ, name string, add, remove []string) GrantChange {
	return GrantChange{Principal: DefaultClientID, SecurableType: typ, FullName: name, Add: add, Remove: remove}
}

func TestGrantsStrictNameTheMissingPrivilege(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Grants.Strict = true })
	steps := []struct {
		grant GrantChange
		want  string // "" = the stream opens
	}{
		{GrantChange{}, "User does not have USE CATALOG on Catalog 'main'"},
		{change(SecurableCatalog, "main", []string{"use catalog"}, nil), "User does not have USE SCHEMA on Schema 'main.default'"},
		{change(SecurableSchema, "main.default", []string{PrivUseSchema}, nil), "User does not have SELECT on Table 'main.default.events'"},
		// Inherited privileges are not enough: SELECT and MODIFY on the
		// catalog and the schema leave the table refused.
		{change(SecurableCatalog, "main", []string{PrivSelect, PrivModify}, nil), "User does not have SELECT on Table 'main.default.events'"},
		{change(SecurableSchema, "main.default", []string{PrivSelect, PrivModify}, nil), "User does not have SELECT on Table 'main.default.events'"},
		{change(SecurableTable, testTable, []string{PrivSelect}, nil), "User does not have MODIFY on Table 'main.default.events'"},
		{change(SecurableTable, testTable, []string{PrivModify}, nil), ""},
	}
	for i, st := range steps {
		if st.grant.Principal != "" {
			require.NoError(t, srv.UpdateGrants(st.grant))
		}
		err := openStatus(t, srv)
		if st.want == "" {
			require.NoError(t, err, "step %d", i)
			continue
		}
		require.Error(t, err, "step %d", i)
		assert.Equal(t, codes.PermissionDenied, status.Code(err), "step %d", i)
		assert.Contains(t, status.Convert(err).Message(), st.want, "step %d", i)
	}

	// Another principal's grants do not count.
	require.NoError(t, srv.UpdateGrants(change(SecurableTable, testTable, nil, []string{PrivModify}),
		GrantChange{Principal: "someone-else", SecurableType: SecurableTable, FullName: testTable, Add: []string{PrivModify}}))
	assert.Equal(t, codes.PermissionDenied, status.Code(openStatus(t, srv)))

	// ALL PRIVILEGES on the table itself counts.
	require.NoError(t, srv.UpdateGrants(change(SecurableTable, testTable, []string{PrivAllPrivileges}, []string{PrivSelect})))
	assert.NoError(t, openStatus(t, srv))
}

func TestGrantsRevokeThenGrantWithoutRestart(t *testing.T) {
	srv := startEmu(t, func(c *Config) {
		c.Grants = GrantsConfig{Strict: true, Grants: []Grant{
			{Principal: DefaultClientID, SecurableType: SecurableCatalog, FullName: "main", Privileges: []string{PrivUseCatalog}},
			{Principal: DefaultClientID, SecurableType: SecurableSchema, FullName: "main.default", Privileges: []string{PrivUseSchema}},
			{Principal: DefaultClientID, SecurableType: SecurableTable, FullName: testTable, Privileges: []string{PrivSelect, PrivModify}},
		}}
	})
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	p, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 5)
	defer rec.Release()
	require.NoError(t, p.send(rec, 0))
	p.waitRecords(5)
	require.NoError(t, p.finish())

	code, view := patchGrants(t, srv, map[string]any{"changes": []GrantChange{change(SecurableTable, testTable, nil, []string{"MODIFY"})}})
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, GrantsStrict, view.Mode)
	assert.Contains(t, view.Grants, Grant{Principal: DefaultClientID, SecurableType: SecurableTable, FullName: testTable, Privileges: []string{PrivSelect}})

	// The same token: the check is made at open, against today's grants.
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "MODIFY on Table 'main.default.events'")
	// The JSON record path is refused the same way.
	_, _, err = openEphemeral(t, srv, tok, testTable, zbpb.RecordType_JSON)
	assert.Equal(t, codes.PermissionDenied, status.Code(err))

	code, _ = patchGrants(t, srv, map[string]any{"changes": []GrantChange{change(SecurableTable, testTable, []string{"MODIFY"}, nil)}})
	require.Equal(t, http.StatusOK, code)
	p, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	rec2 := makeBatch(5, 5)
	defer rec2.Release()
	require.NoError(t, p.send(rec2, 0))
	p.waitRecords(5)
	require.NoError(t, p.finish())
	assert.EqualValues(t, 10, rowCount(t, srv, testTable))

	// Open mode checks nothing.
	code, view = patchGrants(t, srv, map[string]any{"mode": "open", "changes": []GrantChange{change(SecurableCatalog, "main", nil, []string{PrivUseCatalog})}})
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, GrantsOpen, view.Mode)
	assert.NoError(t, openStatus(t, srv))
}

func TestGrantsAdminValidation(t *testing.T) {
	srv := startEmu(t, nil)
	for _, body := range []any{
		map[string]any{"mode": "sometimes"},
		map[string]any{"changes": []GrantChange{{Principal: "p", SecurableType: "VOLUME", FullName: "a.b.c", Add: []string{"SELECT"}}}},
		map[string]any{"changes": []GrantChange{{Principal: "p", SecurableType: "TABLE", FullName: "a.b", Add: []string{"SELECT"}}}},
		map[string]any{"changes": []GrantChange{{Principal: "p", SecurableType: "TABLE", FullName: "a.b.c", Add: []string{"OWN"}}}},
		map[string]any{"changes": []GrantChange{{Principal: "", SecurableType: "TABLE", FullName: "a.b.c", Add: []string{"SELECT"}}}},
		map[string]any{"unknown": 1},
	} {
		code, _ := patchGrants(t, srv, body)
		assert.Equal(t, http.StatusBadRequest, code, "%v", body)
	}
	mode, grants := srv.Grants()
	assert.Equal(t, GrantsOpen, mode)
	assert.Empty(t, grants, "a refused change applies nothing")
}

func TestGrantFlags(t *testing.T) {
	got, err := configFromArgs("--grants", "strict",
		"--grant", "emulator:TABLE:main.default.t:SELECT,MODIFY", "--grant", "emulator:CATALOG:main:USE CATALOG")
	require.NoError(t, err)
	assert.True(t, got.Grants.Strict)
	assert.Equal(t, []Grant{
		{Principal: "emulator", SecurableType: "TABLE", FullName: "main.default.t", Privileges: []string{"SELECT", "MODIFY"}},
		{Principal: "emulator", SecurableType: "CATALOG", FullName: "main", Privileges: []string{"USE CATALOG"}},
	}, got.Grants.Grants)

	assert.Error(t, configArgsError("--grants", "lax"))
	assert.Error(t, configArgsError("--grant", "emulator:TABLE:main.default.t"))
	assert.Error(t, configArgsError("--grant", "emulator:TABLE:main.t:SELECT"))
}

// TestGrantsCheckedBeforeTableExistence: in strict mode a principal without
// the grants learns nothing about a missing table (PERMISSION_DENIED, as
// Unity Catalog answers "Table Exists" only to a caller with USE CATALOG,
// USE SCHEMA and SELECT); with them, the missing table is NOT_FOUND.
func TestGrantsCheckedBeforeTableExistence(t *testing.T) {
	const missing = "main.default.absent"
	srv := startEmu(t, func(c *Config) { c.Grants.Strict = true })
	open := func() error {
		_, _, err := openPut(t, dial(t, srv), zerobusToken(t, srv, missing), missing, testSchema)
		return err
	}
	err := open()
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), err.Error())
	assert.Contains(t, status.Convert(err).Message(), "User does not have USE CATALOG on Catalog 'main'")

	require.NoError(t, srv.UpdateGrants(
		change(SecurableCatalog, "main", []string{PrivUseCatalog}, nil),
		change(SecurableSchema, "main.default", []string{PrivUseSchema}, nil),
	))
	err = open()
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "no SELECT on the table: its existence stays hidden")

	require.NoError(t, srv.UpdateGrants(change(SecurableTable, missing, []string{PrivSelect, PrivModify}, nil)))
	err = open()
	assert.Equal(t, codes.NotFound, status.Code(err), err.Error())
	assert.Contains(t, status.Convert(err).Message(), "table main.default.absent does not exist")
}
