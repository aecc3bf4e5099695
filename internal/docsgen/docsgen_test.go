package docsgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/kafka"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

// repoRoot is the repository root seen from this package's directory.
const repoRoot = "../.."

// TestCommittedDocsAreCurrent is what makes `make test` fail on stale docs:
// it regenerates every page in memory and compares it with the committed
// file, byte for byte (cmd/docs-gen writes Content plus a final newline).
func TestCommittedDocsAreCurrent(t *testing.T) {
	pages, err := Pages(service.GlobalEnvironment())
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, p := range pages {
		got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(p.Path)))
		if err != nil {
			t.Errorf("%s: %v; run make docs", p.Path, err)
			continue
		}
		if want := append(bytes.Clone(p.Content), '\n'); !bytes.Equal(got, want) {
			t.Errorf("%s is stale (it differs from what the spec generates): run make docs and commit the result", p.Path)
		}
	}
}

func TestZerobusPageDocumentsEveryField(t *testing.T) {
	var view *service.ConfigView
	service.GlobalEnvironment().WalkOutputs(func(name string, v *service.ConfigView) {
		if name == "zerobus" {
			view = v
		}
	})
	require.NotNil(t, view, "zerobus output registered")
	page, err := Render(Components[0], view)
	require.NoError(t, err)
	text := string(page)

	td, err := view.TemplateData()
	require.NoError(t, err)
	for _, f := range td.Fields {
		assert.Contains(t, text, "### `"+f.FullName+"`\n", "a section per field")
	}
	for _, want := range []string{
		"# zerobus\n",
		"## Common config\n",
		"## Advanced config\n",
		"## Examples\n",
		"### `endpoint`\n\nThe Zerobus ingest endpoint",
		"**Type:** `string`  \n**Default:** none (required)", // endpoint
		"### `ordering_key`",
		"**Default:** none (optional)",
		"This field supports [interpolation functions]", // ordering_key
		"This field holds a secret",                     // client_secret
		"**Default:** `64`",                             // max_in_flight
		"**Options:** `none`, `lz4_frame`, `zstd`",      // compression
		"[Bloblang query](https://docs.redpanda.com/redpanda-connect/guides/bloblang/about/)", // an xref made a link
		"### Delivery guarantees\n", // AsciiDoc heading turned into Markdown
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "\n== ", "no AsciiDoc heading left")
	assert.NotContains(t, text, "xref:", "no Antora cross reference left")
	assert.NotContains(t, text, "### `ack`\n\nThe per-stream acknowledgement lanes.\n\n**Type:** `object`  \n**Default:** none (required)", "an object with defaulted fields is not required")
	// The common config holds no advanced field; the advanced one does.
	common := text[strings.Index(text, "## Common config"):strings.Index(text, "## Advanced config")]
	assert.NotContains(t, common, "ack:")
	advanced := text[strings.Index(text, "## Advanced config"):strings.Index(text, "## Examples")]
	assert.Contains(t, advanced, "ack:")
}

func TestMissingRequiredComponentFails(t *testing.T) {
	_, err := Pages(service.NewEmptyEnvironment())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"zerobus"`)
}

func TestMarkdownHeadingsLeaveFencesAlone(t *testing.T) {
	in := "== A\ntext\n```\n== not a heading\n```\n=== B"
	assert.Equal(t, "### A\ntext\n```\n== not a heading\n```\n#### B", markdownHeadings(in))
}

func TestXrefLinks(t *testing.T) {
	assert.Equal(t, "see [processors](https://docs.redpanda.com/redpanda-connect/components/processors/about/#batching) now",
		xrefLinks("see xref:components:processors/about.adoc#batching[processors] now"))
}
