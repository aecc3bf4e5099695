package catalog

import (
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Table properties a contract is recorded under.
const (
	PropContractID      = "zerobus.contract.id"
	PropContractVersion = "zerobus.contract.version"
)

// Contract is the part of an ODCS v3 (Open Data Contract Standard) data
// contract the catalog uses: the contract's identity and the descriptions of
// its schema objects and their properties (columns). Everything else in the
// file is ignored.
type Contract struct {
	APIVersion string           `yaml:"apiVersion"`
	Kind       string           `yaml:"kind"`
	ID         string           `yaml:"id"`
	Version    string           `yaml:"version"`
	Name       string           `yaml:"name"`
	Schema     []ContractObject `yaml:"schema"`
}

// ContractObject is one schema object (a table) of a contract.
type ContractObject struct {
	Name         string             `yaml:"name"`
	PhysicalName string             `yaml:"physicalName"`
	Description  string             `yaml:"description"`
	Properties   []ContractProperty `yaml:"properties"`
}

// ContractProperty is one property (a column) of a schema object.
type ContractProperty struct {
	Name         string `yaml:"name"`
	PhysicalName string `yaml:"physicalName"`
	Description  string `yaml:"description"`
}

// LoadContract reads an ODCS v3 YAML data contract from path.
func LoadContract(path string) (*Contract, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read data contract: %w", err)
	}
	c, err := ParseContract(b)
	if err != nil {
		return nil, fmt.Errorf("data contract %s: %w", path, err)
	}
	return c, nil
}

// ParseContract parses an ODCS v3 YAML data contract.
func ParseContract(b []byte) (*Contract, error) {
	var c Contract
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse ODCS YAML: %w", err)
	}
	if c.Kind != "" && c.Kind != "DataContract" {
		return nil, fmt.Errorf("kind %q: want DataContract", c.Kind)
	}
	if len(c.Schema) == 0 {
		return nil, fmt.Errorf("no schema objects")
	}
	for i := range c.Schema {
		o := &c.Schema[i]
		if o.PhysicalName == "" {
			o.PhysicalName = o.Name
		}
		for j := range o.Properties {
			p := &o.Properties[j]
			if p.PhysicalName != "" {
				p.Name = p.PhysicalName // the column as the table spells it
			}
			if p.Name == "" {
				return nil, fmt.Errorf("schema object %q: property %d has no name", o.Name, j)
			}
		}
	}
	return &c, nil
}

// Object returns the schema object describing a table: the one whose
// physical name or name matches the table part of catalog.schema.table
// (case-insensitively), else the only object of a single-object contract,
// else nil.
func (c *Contract) Object(fullName string) *ContractObject {
	_, _, table, err := typemap.ParseTableName(fullName)
	if err != nil {
		table = fullName
	}
	for i, o := range c.Schema {
		if strings.EqualFold(o.PhysicalName, table) || strings.EqualFold(o.Name, table) {
			return &c.Schema[i]
		}
	}
	if len(c.Schema) == 1 {
		return &c.Schema[0]
	}
	return nil
}

// Properties are the table properties recording the contract's identity.
func (c *Contract) Properties() map[string]string {
	out := map[string]string{}
	if c.ID != "" {
		out[PropContractID] = c.ID
	}
	if c.Version != "" {
		out[PropContractVersion] = c.Version
	}
	return out
}
