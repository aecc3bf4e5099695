package tablewriter

import (
	"encoding/json"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func noneKnown(string) bool { return false }

// inferOf infers the fields of JSON messages.
func inferOf(t *testing.T, bodies ...string) ([]arrow.Field, []string) {
	t.Helper()
	var msgs []map[string]any
	for _, b := range bodies {
		v, err := testRow{b: []byte(b)}.AsStructured()
		require.NoError(t, err)
		msgs = append(msgs, v.(map[string]any))
	}
	return inferFields(noneKnown, msgs)
}

func fieldTypes(fs []arrow.Field) map[string]string {
	out := map[string]string{}
	for _, f := range fs {
		out[f.Name] = f.Type.String()
	}
	return out
}

// A field whose values disagree is never dropped: numbers widen int →
// double; other disagreements take the majority type, reported.
func TestInferNeverDropsAColumn(t *testing.T) {
	var bodies []string
	for i := 0; i < 200; i++ {
		q := `7`
		if i%50 == 0 {
			q = `"abc"`
		}
		bodies = append(bodies, `{"id":1,"qty":`+q+`,"price":`+map[bool]string{true: "1", false: "1.5"}[i%2 == 0]+`}`)
	}
	fs, conflicts := inferOf(t, bodies...)
	assert.Equal(t, map[string]string{"id": "int64", "qty": "int64", "price": "float64"}, fieldTypes(fs))
	require.Len(t, conflicts, 1)
	assert.Contains(t, conflicts[0], `field "qty": 196 messages have int64, 4 have utf8 (first: message 0)`)

	// A tie goes to the type seen first; nested and scalar disagree alike.
	fs, conflicts = inferOf(t, `{"a":{"x":1}}`, `{"a":"s"}`, `{"b":true}`, `{"b":2}`, `{"b":3}`)
	assert.Equal(t, map[string]string{"a": "struct<x: int64 nullable>", "b": "int64"}, fieldTypes(fs))
	assert.Len(t, conflicts, 2)
}

// Fields are named by the column-name rule, and fields with one column key
// are one column.
func TestInferNamesFollowTheColumnNameRule(t *testing.T) {
	fs, conflicts := inferOf(t, `{"my-field":2,"a`+"`"+`b); DROP TABLE x; --":"h"}`, `{"My_Field":3,"9lives":{"in-ner":1,"in_ner":2}}`)
	assert.Empty(t, conflicts)
	assert.Equal(t, map[string]string{
		"my_field":               "int64",
		"a_b___DROP_TABLE_x____": "utf8",
		"_9lives":                "struct<in_ner: int64 nullable>",
	}, fieldTypes(fs))
}

func TestUnwritableInferredTypes(t *testing.T) {
	var v any
	require.NoError(t, json.Unmarshal([]byte(`[[1]]`), &v))
	assert.Contains(t, unwritable(inferType(v), 0), "array of arrays")
	require.NoError(t, json.Unmarshal([]byte(`[{"a":[1]}]`), &v))
	assert.Empty(t, unwritable(inferType(v), 0))
}
