package zerobusreplay

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// A replayed VARIANT comes back as the JSON it holds, not as its binaries.
func TestVariantReplaysAsJSON(t *testing.T) {
	b := array.NewStructBuilder(memory.NewGoAllocator(), typemap.VariantArrowType())
	defer b.Release()
	require.NoError(t, appendVariantRow(b, `{"kind":"order","items":[1,2]}`))
	arr := b.NewStructArray()
	defer arr.Release()
	v, err := oracleValue(arr, 0)
	require.NoError(t, err)
	out, err := arrowconv.ToJSON(map[string]any{"doc": v})
	require.NoError(t, err)
	assert.JSONEq(t, `{"doc":{"kind":"order","items":[1,2]}}`, string(out))
}

// appendVariantRow appends the JSON text doc, encoded as a VARIANT, to b,
// the builder of a VARIANT column (metadata and value binaries).
func appendVariantRow(b *array.StructBuilder, doc string) error {
	meta, val, err := arrowconv.EncodeVariantJSON([]byte(doc))
	if err != nil {
		return err
	}
	b.Append(true)
	b.FieldBuilder(0).(*array.BinaryBuilder).Append(meta)
	b.FieldBuilder(1).(*array.BinaryBuilder).Append(val)
	return nil
}
