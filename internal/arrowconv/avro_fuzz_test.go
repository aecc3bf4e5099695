package arrowconv

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/require"
)

// FuzzConvertAvro feeds arbitrary bytes, between two good values, to the
// Avro fast path and to the general path (the registry codec, then
// ConvertStructured): with redo they give the same result; without it the
// good values still land, and a value the fast path takes alone is one the
// general path takes, into the same record.
func FuzzConvertAvro(f *testing.F) {
	g := &avroGen{r: rand.New(rand.NewPCG(11, 11)), bad: true}
	for range 4 {
		f.Add(g.record())
	}
	c := mustConverter(f, avroAllDefs, Options{NTZFromZoned: true})
	p := mustAvroPlan(f, c, avroAllSchema)
	slow := newAvroSlowPath(f, avroAllSchema)
	good := (&avroGen{r: rand.New(rand.NewPCG(3, 3))}).record()
	f.Fuzz(func(t *testing.T, body []byte) {
		bodies := [][]byte{good, body, good}
		want, err := slow.convert(c, bodies)
		require.NoError(t, err)
		defer want.Record.Release()
		got, err := c.ConvertAvro(p, bodies, slow.decode)
		require.NoError(t, err)
		defer got.Record.Release()
		assertSameResult(t, want, got)

		alone, err := c.ConvertAvro(p, bodies, nil)
		require.NoError(t, err)
		defer alone.Record.Release()
		if len(alone.RowErrors) == 0 {
			require.Empty(t, want.RowErrors, "the fast path took a value the general path refuses")
			require.True(t, array.RecordEqual(want.Record, alone.Record))
			return
		}
		require.Len(t, alone.RowErrors, 1)
		require.Equal(t, 1, alone.RowErrors[0].Index)
		require.Equal(t, []int{0, 2}, alone.SourceIndex)
	})
}
