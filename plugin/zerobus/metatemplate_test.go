package zerobus

import (
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkamsg"
)

// TestMetaTemplateRendersAsBenthos: the texts made only of metadata
// references render a pack's record, from its metadata alone, exactly as
// Benthos' interpolation renders the record's message; other texts have no
// template (Benthos renders them).
func TestMetaTemplateRendersAsBenthos(t *testing.T) {
	ts := time.UnixMilli(1700000000123)
	recs := []*kgo.Record{
		{Offset: 41, Timestamp: ts, Key: []byte("k1"), Value: []byte(`{"a":1}`)},
		{Offset: 42, Timestamp: ts.Add(time.Second), Value: nil, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}}},
		// A header named like a kafka_* key wins, as on the message.
		{Offset: 43, Timestamp: ts, Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "kafka_partition", Value: []byte("x")}, {Key: "kafka_partition", Value: []byte("y")}}},
	}
	p := kafkamsg.NewPack(kafkamsg.TP{Topic: "orders", Partition: 5}, recs, 100)
	rows := p.Rows()
	for _, text := range []string{
		`${! @kafka_topic }/${! @kafka_partition }`,
		`${! meta("kafka_offset") }`,
		`${!@kafka_offset}`,
		`${! metadata("kafka_key") }`,
		`main.raw.${! @kafka_topic }_p${! @kafka_partition }`,
		`${! @kafka_lag } ${! @kafka_timestamp_ms } ${! @kafka_timestamp_unix } ${! @kafka_tombstone_message }`,
		`plain text`,
	} {
		tmpl := compileMetaTemplate(text)
		require.NotNil(t, tmpl, text)
		f, err := service.NewInterpolatedString(text)
		require.NoError(t, err)
		for i := range rows {
			want, err := f.TryString(rows[i].Message())
			require.NoError(t, err)
			got, ok := tmpl.render(rows[i].Meta)
			require.True(t, ok, "%s, record %d", text, i)
			assert.Equal(t, want, got, "%s, record %d", text, i)
			viaRow, err := rowString(f, tmpl, &rows[i])
			require.NoError(t, err)
			assert.Equal(t, want, viaRow)
		}
	}

	// A header only some records have: the others fall back to Benthos,
	// which renders the missing value as it does.
	f, err := service.NewInterpolatedString(`${! @trace }`)
	require.NoError(t, err)
	tmpl := compileMetaTemplate(`${! @trace }`)
	require.NotNil(t, tmpl)
	for i := range rows {
		want, err := f.TryString(rows[i].Message())
		require.NoError(t, err)
		got, err := rowString(f, tmpl, &rows[i])
		require.NoError(t, err)
		assert.Equal(t, want, got, "record %d", i)
	}

	for _, text := range []string{
		`${! @ }`, `${! @kafka_offset + 1 }`, `${! this.id }`, `${! meta("a") }${! uuid_v4() }`,
		`${{! @kafka_topic }}`, `${! @kafka_topic `, `${! meta("a\"b") }`,
	} {
		assert.Nil(t, compileMetaTemplate(text), "%s is not only metadata references", text)
	}

	// A plain message is rendered by Benthos.
	m := service.NewMessage(nil)
	m.MetaSetMut("kafka_offset", 9)
	f, err = service.NewInterpolatedString(`${! @kafka_offset }`)
	require.NoError(t, err)
	got, err := rowString(f, compileMetaTemplate(`${! @kafka_offset }`), m)
	require.NoError(t, err)
	assert.Equal(t, "9", got)
}

// BenchmarkPackRowInterpolation: coverage's two texts for a pack's
// records, from their metadata (the template) and through each record's
// message (Benthos' interpolation).
func BenchmarkPackRowInterpolation(b *testing.B) {
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Offset: int64(i), Timestamp: time.UnixMilli(1700000000000), Value: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	src, off := `${! @kafka_topic }/${! @kafka_partition }`, `${! @kafka_offset }`
	fs, _ := service.NewInterpolatedString(src)
	fo, _ := service.NewInterpolatedString(off)
	for _, bc := range []struct {
		name   string
		ts, to *metaTemplate
	}{{"template", compileMetaTemplate(src), compileMetaTemplate(off)}, {"message", nil, nil}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				rows := kafkamsg.NewPack(kafkamsg.TP{Topic: "orders", Partition: 3}, recs, 2000).Rows()
				for i := range rows {
					if _, err := rowString(fs, bc.ts, &rows[i]); err != nil {
						b.Fatal(err)
					}
					if _, err := rowString(fo, bc.to, &rows[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
