package arrowconv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func TestQuoteBoundsLongValues(t *testing.T) {
	assert.Equal(t, `"abc"`, Quote("abc"))
	long := strings.Repeat("é", 1<<19) // 1 MiB of two-byte runes
	q := Quote(long)
	assert.Less(t, len(q), MaxQuoted+64)
	assert.True(t, strings.HasSuffix(q, "… (1048576 bytes)"), q)
	assert.NotContains(t, q, `\x`, "cut at a rune boundary")
}

// A message that is not JSON says so, whatever its first byte; a long value
// or field name is quoted to MaxQuoted bytes with its length.
func TestErrorTextHygiene(t *testing.T) {
	c, err := New([]typemap.Column{
		{Name: "n", Type: typemap.Primitive(typemap.Long), Nullable: true},
		{Name: "d", Type: typemap.Primitive(typemap.Date), Nullable: true},
	}, Options{})
	require.NoError(t, err)
	big := strings.Repeat("x", 1<<20)
	res, err := c.ConvertJSON([][]byte{
		[]byte("nonsense"),
		[]byte("[oops"),
		[]byte("null"),
		[]byte("[1,2]"),
		[]byte(`{"d":"` + big + `"}`),
		[]byte(`{"` + big + `":1}`),
	})
	require.NoError(t, err)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 6)
	msgs := make([]string, len(res.RowErrors))
	for i, re := range res.RowErrors {
		msgs[i] = re.Error()
		assert.Less(t, len(msgs[i]), 1024, "message %d is bounded", i)
	}
	assert.ErrorIs(t, res.RowErrors[0].Err, ErrInvalidJSON)
	assert.Contains(t, msgs[0], `the message is not JSON`)
	assert.NotContains(t, msgs[0], "JSON null")
	assert.Contains(t, msgs[1], `the message is not JSON`)
	assert.NotContains(t, msgs[1], "JSON array")
	assert.Contains(t, msgs[2], "got a JSON null", "null is JSON, just not an object")
	assert.Contains(t, msgs[3], "got a JSON array")
	assert.Contains(t, msgs[4], "… (1048576 bytes)")
	assert.Contains(t, msgs[5], "… (1048576 bytes)")
}
