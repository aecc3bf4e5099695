// Command docs-gen writes the generated reference pages of this project's
// components (docs/components/...) from their config specs; `make docs` runs
// it from the repository root. internal/docsgen's test fails when the
// committed pages differ from what this would write.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/docsgen"

	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/kafka"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

func main() {
	root := flag.String("root", ".", "the repository root; pages are written under <root>/docs/components")
	flag.Parse()
	pages, err := docsgen.Pages(service.GlobalEnvironment())
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs-gen:", err)
		os.Exit(1)
	}
	for _, p := range pages {
		path := filepath.Join(*root, filepath.FromSlash(p.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "docs-gen: %s: %v\n", p.Path, err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, append(p.Content, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "docs-gen: %s: %v\n", p.Path, err)
			os.Exit(1)
		}
		fmt.Println("wrote", p.Path)
	}
}
