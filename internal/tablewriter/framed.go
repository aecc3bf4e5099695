// Registry-framed values meeting an output without schema_registry_decode:
// the explanation says what they are and what to add, instead of "no column
// could be inferred" or "invalid JSON".

package tablewriter

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// registryFramed reports whether b is a value in the Confluent wire format
// (magic byte 0, then the schema id as a 4-byte big-endian integer, then
// the encoded value), and its schema id. No JSON text starts with a zero
// byte, so a JSON message is never taken for one. Source: Confluent docs,
// "Wire format",
// https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format
// (registry.Framed reads it).
func registryFramed(b []byte) (uint32, bool) {
	id, ok := registry.Framed(b)
	return uint32(id), ok
}

// framedAdvice is what to do about registry-framed values with these schema
// ids.
func framedAdvice(ids []uint32) string {
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = fmt.Sprint(id)
	}
	label := "schema id"
	if len(ids) > 1 {
		label = "schema ids"
	}
	return fmt.Sprintf("values are Schema Registry framed (%s %s): add a schema_registry_decode processor before the zerobus output", label, strings.Join(texts, ", "))
}

// maxFramedIDs bounds the schema ids one explanation lists.
const maxFramedIDs = 5

// framedHint says that the rows of batch are registry-framed values, when
// some are; "" otherwise. Rows holding a decoded value are not looked at.
func framedHint(batch []Row) string {
	var ids []uint32
	n := 0
	for _, r := range batch {
		id, ok := rowFramed(r)
		if !ok {
			continue
		}
		n++
		if !slices.Contains(ids, id) && len(ids) < maxFramedIDs {
			ids = append(ids, id)
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s (%d of %d messages)", framedAdvice(ids), n, len(batch))
}

func rowFramed(r Row) (uint32, bool) {
	if r.HasStructured() {
		return 0, false
	}
	b, err := r.AsBytes()
	if err != nil {
		return 0, false
	}
	return registryFramed(b)
}

// explainFramed adds to each invalid-JSON row error whose message is a
// registry-framed value what it is and what to add.
func explainFramed(batch []Row, errs []RowError) {
	for k, e := range errs {
		if !errors.Is(e.Err, arrowconv.ErrInvalidJSON) || e.Index < 0 || e.Index >= len(batch) {
			continue
		}
		if id, ok := rowFramed(batch[e.Index]); ok {
			errs[k].Err = fmt.Errorf("%w: %s", e.Err, framedAdvice([]uint32{id}))
		}
	}
}

// noColumns is the error of a first batch no column can be made from, and
// it is remembered (and logged when it changes) for the health report
// until a table is created.
func (a *authority) noColumns(batch []Row, bs batchSchemas) error {
	var err error
	switch hint := framedHint(batch); {
	case hint != "":
		err = fmt.Errorf("table %s does not exist, and no column can be made from a batch of %d messages: %s", a.cfg.Table, len(batch), hint)
	case len(bs.schemas) > 0:
		// Rows without a schema beside rows whose schemas give no column:
		// held, as a batch no column can be inferred from.
		why := "it has no field with a column type"
		for _, s := range bs.schemas {
			if r, found := noColumn(s); found {
				why = r.why
				if r.field != "" {
					why = fmt.Sprintf("field %q: %s", r.field, r.why)
				}
				break
			}
		}
		err = fmt.Errorf("table %s does not exist: no column could be inferred from the messages of a batch of %d without a registry schema, and the registry schema of the others (%s) gives none: %s", a.cfg.Table, len(batch), a.schemaWhere(), why)
	default:
		err = fmt.Errorf("table %s does not exist and no column could be inferred from a batch of %d messages", a.cfg.Table, len(batch))
	}
	msg := err.Error()
	if prev := a.blocked.Swap(&msg); prev == nil || *prev != msg {
		a.warnf("%s", msg)
	}
	return err
}
