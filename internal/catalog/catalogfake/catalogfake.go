// Package catalogfake is an in-memory catalog.TableCatalog for tests of the
// layers above the catalog (the table writer, the output).
package catalogfake

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Catalog is an in-memory catalog.TableCatalog: enough to drive a table
// writer's describe / create / evolve paths without a workspace. Type
// changes are planned by the real catalog.Plan.
type Catalog struct {
	mu         sync.Mutex
	tables     map[string]*catalog.TableState
	reconciles []catalog.DesiredTable
	describes  int
	writers    []catalog.WriterInfo
}

// New returns an empty catalog.
func New() *Catalog { return &Catalog{tables: map[string]*catalog.TableState{}} }

// Put creates or replaces table with the columns cols (DDL column list)
// and properties props.
func (f *Catalog) Put(table string, cols string, props map[string]string) {
	c, err := typemap.ParseColumns(cols)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table] = &catalog.TableState{FullName: table, TableType: "MANAGED", Columns: c, Properties: props}
}

// Drop removes table, as DROP TABLE does.
func (f *Catalog) Drop(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tables, table)
}

// SetProps replaces the properties of table.
func (f *Catalog) SetProps(table string, props map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table].Properties = props
}

func clone(s *catalog.TableState) *catalog.TableState {
	if s == nil {
		return nil
	}
	c := *s
	c.Columns = append([]typemap.Column(nil), s.Columns...)
	c.Properties = maps.Clone(s.Properties)
	return &c
}

// Describe implements catalog.TableCatalog; nil for an absent table.
func (f *Catalog) Describe(_ context.Context, table string) (*catalog.TableState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	return clone(f.tables[table]), nil
}

// Reconcile implements catalog.TableCatalog: it creates an absent table,
// adds missing columns, and applies the widenings, dropped NOT NULLs and
// properties the real planner allows, refusing what it refuses.
func (f *Catalog) Reconcile(_ context.Context, d catalog.DesiredTable) (catalog.ReconcileOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reconciles = append(f.reconciles, d)
	live := f.tables[d.FullName]
	n := 0
	if live != nil {
		// Type changes are decided by the real planner: widenings only
		// when opted in and legal under the table's Iceberg rules.
		p := catalog.Plan(live, d)
		if err := p.RefusedError(); err != nil {
			return catalog.ReconcileOutcome{Plan: p, State: clone(live)}, err
		}
		for _, s := range p.Steps {
			switch s.Kind {
			case catalog.StepWidenColumn:
				for i := range live.Columns {
					if strings.EqualFold(live.Columns[i].Name, s.Column) {
						live.Columns[i].Type = s.Type
					}
				}
				n++
			case catalog.StepDropNotNull:
				for i := range live.Columns {
					if strings.EqualFold(live.Columns[i].Name, s.Column) {
						live.Columns[i].Nullable = true
					}
				}
				n++
			case catalog.StepSetProperty:
				if live.Properties == nil {
					live.Properties = map[string]string{}
				}
				for k, v := range s.Properties {
					live.Properties[k] = v
				}
				n++
			}
		}
	}
	if live == nil {
		live = &catalog.TableState{FullName: d.FullName, TableType: "MANAGED", Properties: maps.Clone(d.Properties)}
		if live.Properties == nil {
			live.Properties = map[string]string{}
		}
		if d.Role == catalog.RolePrimaryRaw {
			maps.Copy(live.Properties, catalog.PrimaryRawProperties())
		}
		f.tables[d.FullName] = live
		n++
	}
	for _, c := range d.Columns {
		if _, ok := live.Column(c.Name); !ok {
			live.Columns = append(live.Columns, c)
			n++
		}
	}
	return catalog.ReconcileOutcome{Statements: n, State: clone(live)}, nil
}

// RegisterWriter implements catalog.TableCatalog.
func (f *Catalog) RegisterWriter(_ context.Context, _ string, w catalog.WriterInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writers = append(f.writers, w)
	return nil
}

// VendCredentials implements catalog.TableCatalog: not supported.
func (f *Catalog) VendCredentials(context.Context, string, catalog.Access) (*catalog.VendedCredentials, error) {
	return nil, errors.New("not supported by the fake")
}

// Describes is the number of Describe calls so far.
func (f *Catalog) Describes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.describes
}

// Reconciled returns the desired tables Reconcile was called with, in
// order.
func (f *Catalog) Reconciled() []catalog.DesiredTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]catalog.DesiredTable(nil), f.reconciles...)
}

// ReconcileCount is the number of Reconcile calls so far.
func (f *Catalog) ReconcileCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reconciles)
}
