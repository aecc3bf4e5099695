package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

var reservedEmitTS = typemap.Column{Name: "_zb_emit_ts", Type: typemap.Primitive(typemap.Timestamp), Nullable: false,
	Comment: "Time the zerobus output stamped this row at write"}

func TestDesiredFromArrow(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "user-name", Type: arrow.BinaryTypes.String, Nullable: true,
			Metadata: arrow.NewMetadata([]string{"comment"}, []string{"Who"})},
		{Name: "1st", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "_zb_emit_ts", Type: arrow.PrimitiveTypes.Int64}, // replaced by the reserved definition
	}, nil)
	d, err := DesiredFromArrow(tbl, schema, reservedEmitTS)
	require.NoError(t, err)
	assert.Equal(t, tbl, d.FullName)
	assert.Equal(t, RoleDerived, d.Role)
	assert.Equal(t, PolicyRespect, d.CommentsPolicy)
	want := []typemap.Column{
		{Name: "id", Type: typemap.Primitive(typemap.Long)},
		{Name: "user_name", Type: typemap.Primitive(typemap.String), Nullable: true, Comment: "Who"},
		{Name: "_1st", Type: typemap.Primitive(typemap.TimestampNTZ), Nullable: true},
		reservedEmitTS,
	}
	assert.Equal(t, want, d.Columns)
}

func TestDesiredFromArrowErrors(t *testing.T) {
	tests := []struct {
		name   string
		table  string
		fields []arrow.Field
		want   string
	}{
		{name: "bad table name", table: "events", fields: []arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int8}}, want: "three"},
		{name: "collision after sanitising", table: tbl,
			fields: []arrow.Field{{Name: "a-b", Type: arrow.PrimitiveTypes.Int8}, {Name: "a_b", Type: arrow.PrimitiveTypes.Int8}}, want: `"a-b" and "a_b"`},
		{name: "case collision", table: tbl,
			fields: []arrow.Field{{Name: "A", Type: arrow.PrimitiveTypes.Int8}, {Name: "a", Type: arrow.PrimitiveTypes.Int8}}, want: "both map"},
		{name: "unmappable type names the column", table: tbl,
			fields: []arrow.Field{{Name: "d", Type: arrow.FixedWidthTypes.Duration_s}}, want: `column "d"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DesiredFromArrow(tc.table, arrow.NewSchema(tc.fields, nil))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

const contractYAML = `
apiVersion: v3.0.2
kind: DataContract
id: urn:datacontract:events
version: 1.2.0
name: Events
status: active
schema:
  - name: other
    properties:
      - name: id
        description: not this one
  - name: Events
    physicalName: events
    description: Raw click events
    logicalType: object
    properties:
      - name: id
        logicalType: integer
        description: Event identifier
      - name: user-name
        description: The user
      - name: display
        physicalName: label
        description: Shown label
      - name: absent
        description: Not in the schema
`

func TestContract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "contract.yaml")
	require.NoError(t, os.WriteFile(path, []byte(contractYAML), 0o600))
	c, err := LoadContract(path)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{PropContractID: "urn:datacontract:events", PropContractVersion: "1.2.0"}, c.Properties())

	d := DesiredTable{FullName: tbl, Columns: []typemap.Column{
		{Name: "id", Type: typemap.Primitive(typemap.Long)},
		{Name: "user_name", Type: typemap.Primitive(typemap.String)},
		{Name: "LABEL", Type: typemap.Primitive(typemap.String)},
		reservedEmitTS,
	}, Comments: map[string]string{"id": "from config wins"}}
	d.ApplyContract(c)
	assert.Equal(t, map[string]string{"id": "from config wins", "user_name": "The user", "LABEL": "Shown label"}, d.Comments)
	assert.Equal(t, "Raw click events", d.Comment)
	assert.Equal(t, "1.2.0", d.Properties[PropContractVersion])
	assert.Equal(t, reservedEmitTS.Comment, d.comment(reservedEmitTS), "reserved columns keep the built-in description")
}

func TestContractErrors(t *testing.T) {
	for name, text := range map[string]string{
		"not yaml":       "schema: [",
		"wrong kind":     "kind: Other\nschema: [{name: a}]",
		"no schema":      "kind: DataContract\nid: x",
		"unnamed column": "schema: [{name: a, properties: [{description: x}]}]",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseContract([]byte(text))
			assert.Error(t, err)
		})
	}
	_, err := LoadContract(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.Error(t, err)
}

func TestVendedCredentialsNeverPrintSecrets(t *testing.T) {
	v := &VendedCredentials{
		AWS:        &AWSCreds{AccessKeyID: "AKIAEXAMPLEKEY", SecretAccessKey: "s3cr3t-value", SessionToken: "sess-token-value"},
		Expiration: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		URL:        "s3://bucket/table",
	}
	for _, s := range []string{v.String(), fmt.Sprintf("%v", v), fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v), fmt.Sprintf("%+v", *v), fmt.Sprintf("%v", []any{v, *v}), fmt.Sprint(*v.AWS), fmt.Sprintf("%#v", *v.AWS)} {
		assert.NotContains(t, s, "s3cr3t-value")
		assert.NotContains(t, s, "sess-token-value")
		assert.NotContains(t, s, "AKIAEXAMPLEKEY")
	}
	assert.Equal(t, "credentials(aws, url=s3://bucket/table, expires=2026-01-02T03:04:05Z)", v.String())
	assert.True(t, v.ExpiresWithin(v.Expiration.Add(-time.Minute), 2*time.Minute))
	assert.False(t, v.ExpiresWithin(v.Expiration.Add(-time.Hour), 2*time.Minute))

	for _, s := range []string{(&VendedCredentials{AzureSAS: "sv=secret-sas"}).String(), (&VendedCredentials{GCPToken: "ya29.secret"}).String()} {
		assert.NotContains(t, s, "secret")
	}
}

func TestUCConfigStringRedactsSecrets(t *testing.T) {
	c := UCConfig{Host: "https://x", ClientID: "cid", ClientSecret: "very-secret", Token: "dapi-secret-token", WarehouseID: "wh"}
	for _, s := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%v", &c)} {
		assert.NotContains(t, s, "very-secret")
		assert.NotContains(t, s, "dapi-secret-token")
		assert.Contains(t, s, "cid")
	}
}

func TestTableStateArrowSchema(t *testing.T) {
	s := &TableState{FullName: tbl, Columns: []typemap.Column{
		{Name: "id", Type: typemap.Primitive(typemap.Long)},
		{Name: "tags", Type: typemap.ArrayOf(typemap.Primitive(typemap.String)), Nullable: true},
	}}
	sc, err := s.ArrowSchema()
	require.NoError(t, err)
	require.Equal(t, 2, sc.NumFields())
	assert.Equal(t, "id", sc.Field(0).Name)
	assert.False(t, sc.Field(0).Nullable)
	assert.Equal(t, arrow.PrimitiveTypes.Int64, sc.Field(0).Type)

	bad := &TableState{FullName: tbl, Columns: []typemap.Column{{Name: "x", Type: typemap.Type{Kind: "NOPE"}}}}
	_, err = bad.ArrowSchema()
	assert.ErrorContains(t, err, tbl)
}
