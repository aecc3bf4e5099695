// The schema_registry block: the output decodes Schema Registry framed
// values itself (the fast path for Avro and Protobuf, internal/fastpath), and the
// registry's schemas type the table (tablewriter's registry schema source).

package zerobus

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/fastpath"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
)

// registryName names the block in its log lines and health entry.
const registryName = "zerobus " + fSchemaReg

// registryOptions are the codec options of the values the output decodes:
// the shapes the processor path lands with avro.preserve_logical_types and
// avro.raw_unions on (the fast path's, fastpath.Options); Protobuf values
// kept decoded (64-bit integers, bytes and timestamps keep their types)
// and JSON Schema values coerced to their schema's types, since the table
// takes the schema's types.
var registryOptions = func() registry.Options {
	o := fastpath.Options
	o.Protobuf.SerializeToJSON = false
	o.JSON.CoerceData = true
	return o
}()

// schemaRegistry builds the schema_registry block's decoder into wcfg when
// the block is on (url set): the registry schema source and the Avro fast
// path, both through one Holder (one cache, one fault explanation), which
// the health endpoint reports. It returns the function that removes that
// health entry (nil when off).
func (c *outputConfig) schemaRegistry(mgr *service.Resources, wcfg *tablewriter.Config) (func(), error) {
	if c.registryConf == nil {
		return nil, nil
	}
	client, err := schemaregistry.ParseClient(c.registryConf, mgr.FS(), fSchemaReg+".")
	if err != nil {
		return nil, err
	}
	h, err := schemaregistry.NewHolder(client, registryOptions, mgr.Logger(), registryName)
	if err != nil {
		return nil, err
	}
	c.registryKnobs = client.Knobs()
	c.registryHolder = h
	wcfg.Registry = h
	wcfg.Fast = fastpath.New(h)
	_, remove, herr := healthhttp.AttachProcessor(mgr, mgr.Label(), healthhttp.Processor{Type: registryName, Health: h.Health})
	if herr != nil {
		mgr.Logger().Warnf("%s: no health endpoint %s: %v", registryName, healthhttp.Path, herr)
	}
	return remove, nil
}
