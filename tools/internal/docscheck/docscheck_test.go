package docscheck_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/tools/internal/docscheck"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

const zero = "v0.0.0-00010101000000-000000000000"

// repoFiles is a tiny repository: two library modules, an examples module
// and a guide.
var repoFiles = map[string]string{
	"go.mod":  "module example.com/tiny\n\ngo 1.26.0\n",
	"tiny.go": "package tiny\n\n// Greeting greets.\nfunc Greeting() string { return \"hello\" }\n",
	"lib/sub/go.mod": "module example.com/tiny/lib/sub\n\ngo 1.26.0\n\nrequire example.com/tiny v0.1.0\n\n" +
		"replace example.com/tiny => ../..\n",
	"lib/sub/sub.go":  "package sub\n\nimport \"example.com/tiny\"\n\n// Hello greets from sub.\nfunc Hello() string { return tiny.Greeting() + \" from sub\" }\n",
	"examples/go.mod": "module example.com/tiny/examples\n\ngo 1.26.0\n\nrequire example.com/tiny " + zero + "\n\nreplace example.com/tiny => ../\n",
	"img/logo.png":    "png",
	"docs/guide.md": "# Guide\n\n## Getting started\n\nText.\n\n## The `Receiver` API (v2)!\n\n## Usage\n\n## Usage\n\n" +
		"<a id=\"custom-anchor\"></a>\n\n<div id=\"block-anchor\">\n\nIn a block.\n\n</div>\n\nBack to the [README](../README.md#tiny) and [the root](/README.md).\n",
}

// good is a README whose every link, anchor and complete snippet is fine.
const good = "# Tiny\n\n" +
	"See [the guide](docs/guide.md), [getting started](docs/guide.md#getting-started),\n" +
	"[the API](docs/guide.md#the-receiver-api-v2), [usage again](docs/guide.md#usage-1),\n" +
	"[a custom anchor](docs/guide.md#custom-anchor), [a block's anchor](docs/guide.md#block-anchor), [below](#install), [the lib](lib/sub),\n" +
	"[from the root](/docs/guide.md#usage), [the web](https://example.com/x.md#nope), [mail](mailto:a@b.c)\n" +
	"and ![the logo](img/logo.png).\n\n" +
	"[ref]: docs/guide.md#getting-started\n\nA [reference link][ref].\n\n" +
	"## Install\n\n" +
	"```go run\npackage main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/tiny\"\n\tsub \"example.com/tiny/lib/sub\"\n)\n\n" +
	"func main() { fmt.Println(tiny.Greeting(), sub.Hello()) }\n```\n\n" +
	"A fragment, not marked complete, is not compiled:\n\n```go\nx := tiny.Greeting()\n```\n"

func newRepo(t *testing.T, readme string) string {
	t.Helper()
	root := t.TempDir()
	testrepo.Write(t, root, repoFiles)
	testrepo.Write(t, root, map[string]string{"README.md": readme})
	return root
}

func check(t *testing.T, root string, extra ...string) ([]docscheck.Problem, docscheck.Stats) {
	t.Helper()
	files, err := docscheck.DefaultFiles(root)
	require.NoError(t, err)
	for _, e := range extra {
		files = append(files, filepath.Join(root, e))
	}
	ps, st, err := docscheck.Check(context.Background(), docscheck.Options{
		Root: root, Files: files,
		// Offline: the snippets use only the repository's modules.
		Env: []string{"GOPROXY=off", "GOSUMDB=off"},
	})
	require.NoError(t, err)
	return ps, st
}

// A README with sound links, anchors and snippets passes.
func TestGoodDocs(t *testing.T) {
	t.Parallel()
	root := newRepo(t, good)
	ps, st := check(t, root)
	require.Empty(t, ps)
	require.Equal(t, docscheck.Stats{Files: 2, Links: 15, Snippets: 1}, st)
}

// Each broken thing is reported at its line, and nothing else is.
func TestBrokenDocs(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		readme string
		line   int
		want   string
	}{
		"link to a missing file": {"# Tiny\n\nSee\n[the guide](docs/missing.md).\n", 4,
			`broken link "docs/missing.md": docs/missing.md does not exist`},
		"missing image": {"# Tiny\n\n![logo](img/nope.png)\n", 3,
			`broken image "img/nope.png": img/nope.png does not exist`},
		"anchor in another file": {"# Tiny\n\n[x](docs/guide.md#getting-startd)\n", 3,
			`broken anchor "docs/guide.md#getting-startd": docs/guide.md has no heading #getting-startd`},
		"anchor in the same file": {"# Tiny\n\n## Install\n\n[x](#instal)\n", 5,
			`broken anchor "#instal": README.md has no heading #instal`},
		"anchor in the wrong case": {"# Tiny\n\n## Install\n\n[x](#Install)\n", 5,
			`did you mean #install?`},
		"third heading of a name": {"# Tiny\n\n[x](docs/guide.md#usage-2)\n", 3,
			`has no heading #usage-2`},
		"link leaving the repository": {"# Tiny\n\n[x](../outside.md)\n", 3,
			`it leaves the repository`},
		"empty link": {"# Tiny\n\n[x]()\n", 3, `empty link`},
		"snippet that does not compile": {"# Tiny\n\n```go run\npackage main\n\nimport \"example.com/tiny\"\n\nfunc main() {\n\ttiny.Greet()\n}\n```\n", 9,
			`go run snippet: undefined: tiny.Greet`},
		"snippet importing what no module provides": {"# Tiny\n\n```go run\npackage main\n\nimport _ \"example.com/tiny/nope\"\n\nfunc main() {}\n```\n", 6,
			`go run snippet: `},
		"snippet with a vet error": {"# Tiny\n\n```go run\npackage main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Printf(\"%d\\n\", \"text\")\n}\n```\n", 9,
			`go run snippet: fmt.Printf format %d has arg "text" of wrong type string`},
		"snippet without package clause": {"# Tiny\n\n```go run\nfmt.Println(1)\n```\n", 4,
			`go run snippet: expected 'package'`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := newRepo(t, tc.readme)
			ps, _ := check(t, root)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, "README.md", ps[0].File)
			require.Equal(t, tc.line, ps[0].Line, ps[0].String())
			require.Contains(t, ps[0].Msg, tc.want)
		})
	}
}

// Several broken snippets in several files are each reported at their
// own file and line.
func TestSnippetsAcrossFiles(t *testing.T) {
	t.Parallel()
	root := newRepo(t, good+"\n```go run\npackage main\n\nfunc main() { var x int = \"s\"; _ = x }\n```\n")
	testrepo.Write(t, root, map[string]string{
		"docs/more.md": "# More\n\n```go run\npackage other\n\n// F is fine.\nfunc F() {}\n```\n\n```go run\npackage main\n\nfunc main() {\n\tnope()\n}\n```\n",
		"EXTRA.md":     "# Extra\n\n[a missing file](nope.go)\n",
	})
	ps, st := check(t, root, "EXTRA.md")
	require.Equal(t, 4, st.Snippets)
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	require.Len(t, got, 3, strings.Join(got, "\n"))
	require.Contains(t, got[0], `EXTRA.md:3: broken link "nope.go"`)
	require.Contains(t, got[1], "README.md:37: go run snippet: cannot use \"s\"")
	require.Contains(t, got[2], "docs/more.md:14: go run snippet: undefined: nope")
}
