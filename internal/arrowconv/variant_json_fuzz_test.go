package arrowconv

import (
	"testing"

	"github.com/apache/arrow-go/v18/parquet/variant"
)

// FuzzVariantJSON decodes arbitrary variant bytes (metadata, value) with
// VariantJSON, as the output does with what it reads back from a table
// (the replay input, zerobus_to_json): decoded or refused, never a panic.
// Seeds: testdata/fuzz/FuzzVariantJSON and the documents below.
func FuzzVariantJSON(f *testing.F) {
	for _, doc := range []string{`{"a":[1,"x",null,true]}`, `1.50`, `"s"`, `[[[[[[[[1]]]]]]]]`, `{"k":{"k":{"k":{}}}}`, `12345678901234567890.5`} {
		val, err := variant.ParseJSON(doc, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(val.Metadata().Bytes(), val.Bytes())
	}
	// A decimal16 whose scale (48) is out of range: arrow-go's own
	// MarshalJSON panics on it.
	f.Add([]byte("1\x000"), []byte("(00000000000000000"))
	f.Fuzz(func(t *testing.T, meta, val []byte) {
		_, _ = VariantJSON(meta, val)
	})
}
