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

// TestMalformedVariantIsAnError: bytes arrow-go's variant.New accepts but
// its accessors panic on (a truncated primitive) are an error of
// VariantJSON and AppendJSON (the replay input's path), not a panic of the
// process. (A decimal with scale 48, which panics arrow-go's MarshalJSON,
// is formatted by appendVariant itself: see the fuzz seed.)
func TestMalformedVariantIsAnError(t *testing.T) {
	for name, val := range map[string][]byte{
		"truncated primitive": []byte("@\x00\x00\x00\x00"),
	} {
		meta := []byte("1\x000")
		if _, err := VariantJSON(meta, val); err == nil {
			t.Errorf("%s: VariantJSON accepted it", name)
		}
		v, err := variant.New(meta, val)
		if err != nil {
			continue // refused up front: nothing to decode
		}
		if _, err := AppendJSON(nil, map[string]any{"v": v}); err == nil {
			t.Errorf("%s: AppendJSON accepted it", name)
		}
	}
}
