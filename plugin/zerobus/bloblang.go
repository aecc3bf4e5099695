package zerobus

import (
	"github.com/redpanda-data/benthos/v4/public/bloblang"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

// The Bloblang method zerobus_to_json exposes the converter's JSON
// serialiser, so a mapping that turns a nested value into a STRING column by
// hand produces exactly the text reconcile.nested_to_string would.
func init() {
	spec := bloblang.NewPluginSpec().
		Beta().
		Category("Encoding").
		Description("Serialises any value to compact JSON text with the same serialiser the `zerobus` output uses for `reconcile.nested_to_string`: keys of objects in sorted order, `<`, `>` and `&` not escaped, timestamps as RFC 3339, bytes as base64. Use it to write a nested value into a STRING column explicitly.").
		Example("Store an object in a STRING column",
			`root.payload = this.payload.zerobus_to_json()`,
			[2]string{`{"payload":{"b":1,"a":"x<y"}}`, `{"payload":"{\"a\":\"x<y\",\"b\":1}"}`},
		)
	bloblang.MustRegisterMethodV2("zerobus_to_json", spec, func(*bloblang.ParsedParams) (bloblang.Method, error) {
		return func(v any) (any, error) {
			b, err := arrowconv.ToJSON(v)
			if err != nil {
				return nil, err
			}
			return string(b), nil
		}, nil
	})
}
