package typemap

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckTableName(t *testing.T) {
	for _, name := range []string{"main.default.events", "c_1.S2.t_3", "1cat.2sch.3tbl"} {
		assert.NoError(t, CheckTableName(name), name)
	}
	for _, tc := range []struct{ name, rule string }{
		{"main.default", "has 2 dot-separated part(s); want exactly three"},
		{"a.b.c.d", "has 4 dot-separated part(s)"},
		{"", "has 1 dot-separated part(s)"},
		{".default.t", "the catalog part is empty"},
		{"main..t", "the schema part is empty"},
		{"main.default.", "the table part is empty"},
		{"main.default.é", `the table part "é" holds 'é' at byte 0; each part may hold only ASCII letters, digits and underscore`},
		{"a.b.c d", `the table part "c d" holds ' ' at byte 1`},
		{"my-cat.s.t", `the catalog part "my-cat" holds '-' at byte 2`},
		{"`main`.s.t", "holds '`' at byte 0"},
	} {
		err := CheckTableName(tc.name)
		require.Error(t, err, tc.name)
		var tne *TableNameError
		require.True(t, errors.As(err, &tne), tc.name)
		assert.Equal(t, tc.name, tne.Name)
		assert.Contains(t, err.Error(), tc.rule, tc.name)
		assert.True(t, tne.Permanent())
	}
}

func TestGrantHint(t *testing.T) {
	h := GrantHint("main.raw.events", "6f1c-app-id")
	assert.Contains(t, h, "GRANT USE CATALOG ON CATALOG main TO `6f1c-app-id`")
	assert.Contains(t, h, "GRANT USE SCHEMA ON SCHEMA main.raw TO `6f1c-app-id`")
	assert.Contains(t, h, "GRANT SELECT, MODIFY ON TABLE main.raw.events TO `6f1c-app-id`")
	assert.Contains(t, GrantHint("main.raw.events", ""), "TO `<service principal application id>`")
	assert.Contains(t, GrantHint("a.b.c", "we`ird"), "TO `we``ird`", "the principal is quoted as an identifier")
}
