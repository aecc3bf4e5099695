package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func mustColumns(t *testing.T, defs string) []typemap.Column {
	t.Helper()
	cols, err := typemap.ParseColumns(defs)
	require.NoError(t, err)
	return cols
}

func TestRegistryPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	reg, err := OpenRegistry(dir)
	require.NoError(t, err)

	created, err := reg.Create(Table{
		FullName:   "Main.Sales.Orders",
		Columns:    mustColumns(t, "id BIGINT NOT NULL, items ARRAY<STRUCT<sku:STRING NOT NULL,qty:INT>> COMMENT 'lines', price DECIMAL(10,2)"),
		Properties: map[string]string{"k": "v"},
		Tags:       map[string]string{"team": "x"},
		Comment:    "orders",
		Owner:      "alice",
	})
	require.NoError(t, err)
	assert.Equal(t, "main.sales.orders", created.FullName, "UC stores names lower-cased")
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, created.TableID)
	assert.Equal(t, "MANAGED", created.TableType)
	assert.EqualValues(t, 1, created.Version)

	_, err = reg.Update("main.sales.orders", func(tb *Table) error {
		tb.Tags["env"] = "prod"
		tb.Columns = append(tb.Columns, typemap.Column{Name: "note", Type: typemap.Primitive(typemap.String), Nullable: true})
		return nil
	})
	require.NoError(t, err)

	reopened, err := OpenRegistry(dir)
	require.NoError(t, err)
	got, ok := reopened.Get("main.sales.ORDERS")
	require.True(t, ok)
	want, _ := reg.Get("main.sales.orders")
	assert.Equal(t, want.TableID, got.TableID)
	assert.Equal(t, want.Columns, got.Columns)
	assert.Equal(t, map[string]string{"team": "x", "env": "prod"}, got.Tags)
	assert.Equal(t, "orders", got.Comment)
	assert.Equal(t, "alice", got.Owner)
	assert.EqualValues(t, 2, got.Version)
	assert.True(t, want.CreatedAt.Equal(got.CreatedAt))
	assert.False(t, got.Columns[1].Type.Elem.Fields[0].Nullable, "nested nullability survives")

	entries, err := os.ReadDir(filepath.Join(dir, "_registry"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left behind")
}

func TestRegistryCreateAndUpdateRules(t *testing.T) {
	reg, err := OpenRegistry("")
	require.NoError(t, err)
	cols := mustColumns(t, "id BIGINT")

	_, err = reg.Create(Table{FullName: "a.b", Columns: cols})
	require.Error(t, err, "two-part name refused")
	_, err = reg.Create(Table{FullName: "a.b.c"})
	require.Error(t, err, "no columns refused")

	_, err = reg.Create(Table{FullName: "a.b.c", Columns: cols})
	require.NoError(t, err)
	_, err = reg.Create(Table{FullName: "A.B.C", Columns: cols})
	require.True(t, errors.Is(err, ErrAlreadyExists), "got %v", err)

	_, err = reg.Update("a.b.missing", func(*Table) error { return nil })
	require.True(t, errors.Is(err, ErrNotFound), "got %v", err)

	tests := []struct {
		name        string
		fn          func(*Table) error
		wantVersion int64
		wantErr     bool
	}{
		{"no change keeps version", func(*Table) error { return nil }, 1, false},
		{"tag change keeps version", func(tb *Table) error { tb.Tags["a"] = "b"; return nil }, 1, false},
		{"comment change keeps version", func(tb *Table) error { tb.Comment = "c"; return nil }, 1, false},
		{"property change bumps", func(tb *Table) error { tb.Properties["p"] = "1"; return nil }, 2, false},
		{"column comment bumps", func(tb *Table) error { tb.Columns[0].Comment = "x"; return nil }, 3, false},
		{"error stores nothing", func(tb *Table) error { tb.Properties["q"] = "1"; return errors.New("boom") }, 3, true},
		{"identity fields are kept", func(tb *Table) error { tb.FullName = "x.y.z"; tb.TableID = "id"; return nil }, 3, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reg.Update("a.b.c", tc.fn)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			got, ok := reg.Get("a.b.c")
			require.True(t, ok)
			assert.Equal(t, tc.wantVersion, got.Version)
			assert.Equal(t, "a.b.c", got.FullName)
			assert.NotEqual(t, "id", got.TableID)
			_, hasQ := got.Properties["q"]
			assert.False(t, hasQ)
		})
	}
}

func TestRegistryGetReturnsDeepCopy(t *testing.T) {
	reg, err := OpenRegistry("")
	require.NoError(t, err)
	_, err = reg.Create(Table{FullName: "a.b.c", Columns: mustColumns(t, "s STRUCT<x:INT>"), Properties: map[string]string{"k": "v"}})
	require.NoError(t, err)

	got, _ := reg.Get("a.b.c")
	got.Properties["k"] = "changed"
	got.Columns[0].Type.Fields[0].Name = "changed"
	got.Columns[0].Name = "changed"

	again, _ := reg.Get("a.b.c")
	assert.Equal(t, "v", again.Properties["k"])
	assert.Equal(t, "x", again.Columns[0].Type.Fields[0].Name)
	assert.Equal(t, "s", again.Columns[0].Name)
	byID, ok := reg.GetByID(again.TableID)
	require.True(t, ok)
	assert.Equal(t, "a.b.c", byID.FullName)
	assert.Len(t, reg.List(), 1)
}

func TestRegistryConcurrentUpdates(t *testing.T) {
	reg, err := OpenRegistry(t.TempDir())
	require.NoError(t, err)
	_, err = reg.Create(Table{FullName: "a.b.c", Columns: mustColumns(t, "id INT")})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reg.Update("a.b.c", func(tb *Table) error {
				tb.Properties["n"] += "x"
				return nil
			})
			assert.NoError(t, err)
			_, _ = reg.Get("a.b.c")
		}()
	}
	wg.Wait()
	got, _ := reg.Get("a.b.c")
	assert.Len(t, got.Properties["n"], 20)
	assert.EqualValues(t, 21, got.Version)
}
