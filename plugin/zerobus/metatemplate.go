package zerobus

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// metaTemplate is an interpolated field's text when it is only literal text
// and metadata references (`${! @key }`, `${! meta("key") }`, `${!
// metadata("key") }`), as the Kafka configs of coverage and ordering_key
// are. It renders a record of a record pack from the record's metadata
// values, without building the record's message; Benthos' interpolation
// renders them the same (the tests compare the two).
type metaTemplate struct {
	parts []templatePart
}

// templatePart is literal text, or (key set) a metadata value.
type templatePart struct {
	text, key string
}

// metaRef matches the Bloblang of one interpolation that only reads a
// metadata key.
var metaRef = regexp.MustCompile(`^(?:@([A-Za-z0-9_.\-]+)|meta(?:data)?\("([^"\\]+)"\))$`)

// compileMetaTemplate returns raw's template; nil when raw is not only
// literal text and metadata references (Benthos' interpolation then
// renders every row).
func compileMetaTemplate(raw string) *metaTemplate {
	if strings.Contains(raw, "${{!") {
		return nil // an escaped interpolation
	}
	t := &metaTemplate{}
	for rest := raw; rest != ""; {
		i := strings.Index(rest, "${!")
		if i < 0 {
			t.parts = append(t.parts, templatePart{text: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{text: rest[:i]})
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return nil
		}
		m := metaRef.FindStringSubmatch(strings.TrimSpace(rest[i+3 : i+end]))
		if m == nil {
			return nil
		}
		t.parts = append(t.parts, templatePart{key: m[1] + m[2]})
		rest = rest[i+end+1:]
	}
	return t
}

// render renders the template with meta's values; ok false when a key is
// absent or its value is not of a kind rendered here (the caller then
// renders through Benthos).
func (t *metaTemplate) render(meta func(key string) (any, bool)) (string, bool) {
	if len(t.parts) == 1 && t.parts[0].key != "" {
		return metaText(meta(t.parts[0].key))
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.key == "" {
			b.WriteString(p.text)
			continue
		}
		s, ok := metaText(meta(p.key))
		if !ok {
			return "", false
		}
		b.WriteString(s)
	}
	return b.String(), true
}

// metaText is a metadata value as an interpolation renders it: the kinds a
// Kafka record's metadata has.
func metaText(v any, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	switch v := v.(type) {
	case string:
		return v, true
	case int:
		return strconv.Itoa(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// metaRow is a row that gives its metadata without a message: a record of
// a record pack.
type metaRow interface {
	Meta(key string) (any, bool)
}

// rowString renders f for row r: from r's metadata through t when r is a
// record of a pack and f is only metadata references, else through
// Benthos on r's message.
func rowString(f *service.InterpolatedString, t *metaTemplate, r tablewriter.Row) (string, error) {
	if mr, ok := r.(metaRow); ok && t != nil {
		if s, ok := t.render(mr.Meta); ok {
			return s, nil
		}
	}
	return f.TryString(rowMessage(r))
}
