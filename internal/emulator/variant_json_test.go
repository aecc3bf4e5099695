package emulator

import (
	"testing"

	"github.com/apache/arrow-go/v18/parquet/variant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An empty array reads back as [], at the top and nested (arrow-go's own
// MarshalJSON renders it as null).
func TestVariantReadBackKeepsEmptyArrays(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{[]any{}, `[]`},
		{map[string]any{"a": []any{}, "b": map[string]any{}}, `{"a":[],"b":{}}`},
		{[]any{[]any{}, int64(1)}, `[[],1]`},
	} {
		var b variant.Builder
		require.NoError(t, b.Append(tc.v))
		val, err := b.Build()
		require.NoError(t, err)
		got, err := variantValueJSON(val)
		require.NoError(t, err)
		assert.JSONEq(t, tc.want, string(got))
	}
}
