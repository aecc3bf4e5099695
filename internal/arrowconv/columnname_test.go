package arrowconv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// structuredRow is a StructuredRow holding a decoded value.
type structuredRow struct{ v any }

func (r structuredRow) AsBytes() ([]byte, error)   { return nil, nil }
func (r structuredRow) HasStructured() bool        { return true }
func (r structuredRow) AsStructured() (any, error) { return r.v, nil }

// A field matches the column the output creates for it by the column-name
// rule (typemap.SafeIdentifier), in JSON and in structured messages, at the
// top and in structs; two fields with one column in one message fail it
// as duplicates.
func TestFieldsMatchByTheColumnNameRule(t *testing.T) {
	hostile := "a`b); DROP TABLE x; --"
	cols := []typemap.Column{
		{Name: "id", Type: typemap.Primitive(typemap.Long)},
		{Name: typemap.SafeIdentifier("my-field"), Type: typemap.Primitive(typemap.Long), Nullable: true},
		{Name: typemap.SafeIdentifier(hostile), Type: typemap.Primitive(typemap.String), Nullable: true},
		{Name: "s", Type: typemap.Type{Kind: typemap.Struct, Fields: []typemap.Field{{Name: "in_ner", Type: typemap.Primitive(typemap.Long), Nullable: true}}}, Nullable: true},
	}
	c, err := New(cols, Options{})
	require.NoError(t, err)

	res, err := c.ConvertJSON([][]byte{
		[]byte(`{"id":1,"my-field":2,"a` + "`" + `b); DROP TABLE x; --":"h","s":{"in-ner":3}}`),
		[]byte(`{"id":2,"My-Field":4}`),
		[]byte(`{"id":3,"my-field":5,"my_field":6}`),
		[]byte(`{"id":4,"other-field":1}`),
	})
	require.NoError(t, err)
	defer res.Record.Release()
	assert.Equal(t, []int{0, 1}, res.SourceIndex)
	assert.Equal(t, "[2 4]", res.Record.Column(1).String())
	assert.Equal(t, `["h" (null)]`, res.Record.Column(2).String())
	assert.Equal(t, 4, res.Reconciled[ReconcileFieldNameCase], "matches by the rule are counted with case-insensitive ones")
	require.Len(t, res.RowErrors, 2)
	assert.ErrorIs(t, res.RowErrors[0].Err, ErrDuplicateField)
	assert.Contains(t, res.RowErrors[0].Error(), `maps to "my_field"`)
	assert.ErrorIs(t, res.RowErrors[1].Err, ErrUnknownField)

	sres, err := c.ConvertStructured([]StructuredRow{
		structuredRow{map[string]any{"id": int64(1), "my-field": int64(2), hostile: "h", "s": map[string]any{"in-ner": int64(3)}}},
	})
	require.NoError(t, err)
	defer sres.Record.Release()
	require.Empty(t, sres.RowErrors)
	assert.Equal(t, "[2]", sres.Record.Column(1).String())
	assert.Equal(t, `["h"]`, sres.Record.Column(2).String())
}

// A null for a field the table lacks is the field absent, in JSON and
// structured messages and in structs; a value is still an unknown field.
func TestNullForAnUnknownFieldIsAbsent(t *testing.T) {
	cols := []typemap.Column{
		{Name: "id", Type: typemap.Primitive(typemap.Long)},
		{Name: "s", Type: typemap.Type{Kind: typemap.Struct, Fields: []typemap.Field{{Name: "a", Type: typemap.Primitive(typemap.Long), Nullable: true}}}, Nullable: true},
	}
	c, err := New(cols, Options{})
	require.NoError(t, err)
	res, err := c.ConvertJSON([][]byte{
		[]byte(`{"nope":null,"id":1,"s":{"x":null,"a":2}}`),
		[]byte(`{"id":2,"nope":null}`),
		[]byte(`{"id":3,"nope":0}`),
	})
	require.NoError(t, err)
	defer res.Record.Release()
	assert.Equal(t, []int{0, 1}, res.SourceIndex)
	require.Len(t, res.RowErrors, 1)
	assert.ErrorIs(t, res.RowErrors[0].Err, ErrUnknownField)

	sres, err := c.ConvertStructured([]StructuredRow{structuredRow{map[string]any{"id": int64(1), "nope": nil, "s": map[string]any{"x": nil}}}})
	require.NoError(t, err)
	defer sres.Record.Release()
	assert.Empty(t, sres.RowErrors)
}
