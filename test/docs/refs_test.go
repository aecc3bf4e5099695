// Package docs holds checks over the repository's own text: the code
// comments, the docs and the examples must stand alone.
package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// textExts are the files whose references are checked.
var textExts = map[string]bool{".go": true, ".md": true, ".yaml": true, ".yml": true, ".sh": true, ".proto": true, ".js": true, ".json": false}

// outside are references to places outside the repository: a build
// machine's paths and private notes, which a reader of the repository can
// never open. Split so that this file does not match itself.
var outside = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(` + `/wo` + `rk/|/ho` + `me/|/Us` + `ers/|(?:\.\./)*sha` + `red/(?:spec|seeds)\b)`)

// repoPath is a citation of a file in the repository: a path under one of
// its top-level directories, with an extension, and an optional #anchor.
var repoPath = regexp.MustCompile(`(?:^|[\s(\x60'"\[])((?:internal|plugin|cmd|test|docs|config|scripts|conformance|deploy)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(?:go|md|yaml|yml|sh|json|js|proto))(#[a-z0-9-]+)?`)

// mdLink is a markdown link target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestReferencesStayInTheRepository fails on any reference to a file
// outside the repository (a machine path, private notes) and on any
// citation of a repository file, or of a section of one of its documents,
// that does not exist: markdown links, and paths such as
// internal/ingest/frames.go or docs/protocol.md#endpoints in code and docs.
func TestReferencesStayInTheRepository(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{} // markdown file → its heading anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(t, path)
		anchors[path] = a
		return a
	}
	checkTarget := func(where, rel, anchor string) {
		target := filepath.Join(root, filepath.FromSlash(rel))
		if _, err := os.Stat(target); err != nil {
			t.Errorf("%s: cites %s, which is not in the repository", where, rel)
			return
		}
		if anchor != "" && strings.HasSuffix(rel, ".md") && !anchorsOf(target)[anchor] {
			t.Errorf("%s: cites %s#%s, which has no such section", where, rel, anchor)
		}
	}

	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == ".git" || name == "node_modules" || name == "bin" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !textExts[filepath.Ext(name)] && name != "Makefile" && name != "Dockerfile" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "test/docs/refs_test.go" {
			return nil // its own test lines are meant to match
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			where := rel + ":" + itoa(n)
			if m := outside.FindStringSubmatch(line); m != nil {
				t.Errorf("%s: refers to %q, outside the repository; cite a public source or docs/protocol.md", where, m[1])
			}
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				checkTarget(where, m[1], strings.TrimPrefix(m[2], "#"))
			}
			if strings.HasSuffix(name, ".md") {
				for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
					link := m[1]
					if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
						continue
					}
					file, anchor, _ := strings.Cut(link, "#")
					if file == "" {
						file = name // a section of this document
					}
					target := filepath.ToSlash(filepath.Join(filepath.Dir(rel), file))
					if strings.HasPrefix(target, "../") {
						t.Errorf("%s: links to %s, outside the repository", where, link)
						continue
					}
					checkTarget(where, target, anchor)
				}
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
}

// TestReferenceCheckCatches runs the patterns on lines that must be caught
// and lines that must not, so that a pattern gone blind fails here.
func TestReferenceCheckCatches(t *testing.T) {
	for _, l := range []string{
		"// see /wo" + "rk/sha" + "red/sp" + "ec/zerobus-wire.md",
		"(sha" + "red/spec/zerobus-wire.md, \"Endpoints\")",
		"../sha" + "red/spec/x.md",
		"/ho" + "me/user/notes.md",
	} {
		require.NotNil(t, outside.FindStringSubmatch(l), l)
	}
	for _, l := range []string{"internal/emulator/shared.go", "a shared/ token", "https://example.com/work/x"} {
		require.Nil(t, outside.FindStringSubmatch(l), l)
	}
	m := repoPath.FindStringSubmatch("counted in plugin/zerobus/metrics.go and")
	require.Equal(t, "plugin/zerobus/metrics.go", m[1])
	m = repoPath.FindStringSubmatch("(docs/protocol.md#arrow-flight-doput)")
	require.Equal(t, []string{"docs/protocol.md", "#arrow-flight-doput"}, m[1:])
	require.Nil(t, repoPath.FindStringSubmatch("config/examples/*.yaml"))
	require.Equal(t, "arrow-flight-doput", anchorOf("## Arrow Flight DoPut"))
	require.Equal(t, "record-path-ephemeralstream", anchorOf("## Record path (EphemeralStream)"))
	require.Equal(t, "pipelines-teste2e", anchorOf("## Pipelines (`test/e2e`)"))
}

// headingAnchors returns the GitHub anchors of a markdown file's headings
// (and of explicit <a name=…> / id=… targets).
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			for _, m := range explicitAnchor.FindAllStringSubmatch(line, -1) {
				out[m[1]] = true
			}
			continue
		}
		a := anchorOf(line)
		if k := seen[a]; k > 0 {
			out[a+"-"+itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var explicitAnchor = regexp.MustCompile(`(?:name|id)="([^"]+)"`)

// anchorOf is GitHub's anchor of a heading line: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func anchorOf(heading string) string {
	h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(heading, "#")))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// repoRoot is the directory holding go.mod, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}
