package apicheck_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/tools/internal/apicheck"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

const zero = "v0.0.0-00010101000000-000000000000"

// tiny has two library modules, the root (package tiny, with a type T of
// two methods, and package tiny/extra) and lib/sub, which requires the
// root through a replace; an examples module, never released; and a
// command module.
func tiny() map[string]string {
	return map[string]string{
		"go.mod":            "module example.com/tiny\n\ngo 1.26.0\n",
		"tiny.go":           "package tiny\n\n// T is a thing.\ntype T struct{}\n\n// A is one method.\nfunc (T) A() string { return \"a\" }\n\n// B is another.\nfunc (T) B() string { return \"b\" }\n",
		"g.go":              "package tiny\n\n// G is generic.\ntype G[M, R any] struct{}\n\n// F goes away.\nfunc (*G[M, R]) F() {}\n",
		"tiny_test.go":      "package tiny\n\nfunc TestOnly() {}\n",
		"extra/extra.go":    "package extra\n\n// X is extra.\nfunc X() int { return 1 }\n",
		"internal/in/in.go": "package in\n\n// Hidden is internal.\nfunc Hidden() {}\n",
		"lib/sub/go.mod":    "module example.com/tiny/lib/sub\n\ngo 1.26.0\n\nrequire example.com/tiny " + zero + "\n\nreplace example.com/tiny => ../..\n",
		"lib/sub/sub.go":    "package sub\n\nimport \"example.com/tiny\"\n\n// Get returns a T.\nfunc Get() tiny.T { return tiny.T{} }\n",
		"examples/go.mod":   "module example.com/tiny/examples\n\ngo 1.26.0\n",
		"examples/ex.go":    "package examples\n\n// E goes away freely.\nfunc E() {}\n",
		"cmd/hi/go.mod":     "module example.com/tiny/cmd/hi\n\ngo 1.26.0\n",
		"cmd/hi/main.go":    "package main\n\nfunc main() {}\n",
	}
}

// newRepo makes the tiny repository and a second commit whose
// tools/apicheck/base names the first as the v1 surface.
func newRepo(t *testing.T) (root, base string) {
	t.Helper()
	root = testrepo.New(t, tiny())
	base = testrepo.Git(t, root, "rev-parse", "HEAD")
	testrepo.Commit(t, root, "api base", map[string]string{apicheck.BaseFile: "# the v1 surface\n" + base + " v1\n"})
	return root, base
}

func check(t *testing.T, root string) ([]apicheck.Result, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := apicheck.Check(context.Background(), apicheck.Options{Root: root, Out: &out})
	require.NoError(t, err, out.String())
	return res, out.String()
}

func byPath(t *testing.T, res []apicheck.Result, p string) apicheck.Result {
	t.Helper()
	for _, r := range res {
		if r.Module.Path == p {
			return r
		}
	}
	t.Fatalf("no result for %s", p)
	return apicheck.Result{}
}

func TestBreakAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, v string
		want    bool
	}{
		{"v1", "v1.1.0", false},
		{"v1", "v1.0.1", false},
		{"v1", "v1.0.0-rc.1", false},
		{"v1", "v1.0.0", false},
		{"v1", "v2.0.0", true},
		{"v1", "v2.0.0-rc.1", true},
		{"v1.0.0-rc.1", "v1.0.0", false}, // a pre-release is its version's line
		{"v1.0.0-rc.1", "v1.0.0-rc.2", false},
		{"v1.4.2", "v1.5.0", false},
		{"v1.4.2", "v2.0.0", true},
		{"v0.1.0", "v0.1.1", false}, // a v0 patch may not break
		{"v0.1.0", "v0.2.0", true},  // a v0 minor may
		{"v0.1.0", "v0.2.0-rc.1", true},
		{"v0.1.0", "v1.0.0-rc.1", true},
		{"v0.1.0", "v1.0.0", true},
		{"v2.0.0", "v1.9.0", false},
	} {
		require.Equal(t, tc.want, apicheck.BreakAllowed(tc.base, tc.v), "base %s, release %s", tc.base, tc.v)
	}
}

// With no change since the base, every library module (not examples)
// reports no API change, the command module no library package.
func TestCheckNoChange(t *testing.T) {
	t.Parallel()
	root, base := newRepo(t)
	res, out := check(t, root)
	require.Len(t, res, 3, out)
	for _, r := range res {
		require.Empty(t, r.Incompatible, out)
		require.Empty(t, r.Compatible, out)
		require.Equal(t, base, r.Base.Commit)
		require.Equal(t, "v1", r.Base.Version)
		require.False(t, r.Base.Tagged)
	}
	require.Equal(t, 2, byPath(t, res, "example.com/tiny").Packages, "tiny and extra: not internal, not tests")
	require.Contains(t, out, "example.com/tiny: base "+base[:12]+" ("+apicheck.BaseFile+", v1): no API change\n")
	require.Contains(t, out, "example.com/tiny/cmd/hi: base "+base[:12]+" ("+apicheck.BaseFile+", v1): no library package\n")
	require.NotContains(t, out, "examples")
}

// A removed method is an incompatible change of its module only, which a
// minor or patch release refuses and a major one accepts; an added one is
// compatible; internal, test, main and examples changes are nobody's API.
func TestCheckRemovedMethod(t *testing.T) {
	t.Parallel()
	root, _ := newRepo(t)
	testrepo.Commit(t, root, "drop T.B, add T.C", map[string]string{
		"tiny.go":           "package tiny\n\n// T is a thing.\ntype T struct{}\n\n// A is one method.\nfunc (T) A() string { return \"a\" }\n\n// C is new.\nfunc (T) C() {}\n",
		"tiny_test.go":      "package tiny\n",
		"g.go":              "package tiny\n\n// G is generic.\ntype G[M, R any] struct{}\n",
		"internal/in/in.go": "package in\n",
		"examples/ex.go":    "package examples\n",
	})
	res, out := check(t, root)
	r := byPath(t, res, "example.com/tiny")
	require.Equal(t, []string{"example.com/tiny: (*G[M, R]).F: removed", "example.com/tiny: T.B: removed"}, r.Incompatible, out)
	require.Equal(t, []string{"example.com/tiny: T.C: added"}, r.Compatible, out)
	require.Empty(t, byPath(t, res, "example.com/tiny/lib/sub").Incompatible, out)
	require.Contains(t, out, "example.com/tiny: base ")
	require.Contains(t, out, ": 2 incompatible, 1 compatible changes\n  incompatible: example.com/tiny: (*G[M, R]).F: removed\n  incompatible: example.com/tiny: T.B: removed\n  compatible:   example.com/tiny: T.C: added\n")

	for _, v := range []string{"v1.1.0", "v1.0.1", "v1.0.0"} {
		refused := apicheck.Refusals(res, v)
		require.Len(t, refused, 1, v)
		require.Contains(t, refused[0], "example.com/tiny "+v+" would break the API of its base")
		require.Contains(t, refused[0], "T.B: removed")
	}
	require.Empty(t, apicheck.Refusals(res, "v2.0.0"))
}

// A module's latest release tag is its base, ahead of the base file.
func TestCheckTagIsTheBase(t *testing.T) {
	t.Parallel()
	root, _ := newRepo(t)
	testrepo.Commit(t, root, "drop extra.X", map[string]string{"extra/extra.go": "package extra\n"})
	testrepo.Git(t, root, "tag", "v0.9.0", "HEAD~2") // older: not the latest
	testrepo.Git(t, root, "tag", "v1.0.0-rc.1", "HEAD~2")
	testrepo.Git(t, root, "tag", "lib/sub/v1.0.0-rc.1", "HEAD")
	testrepo.Git(t, root, "tag", "lib/sub/v1.0.0+meta", "HEAD~2") // not a release tag
	res, out := check(t, root)
	r := byPath(t, res, "example.com/tiny")
	require.Equal(t, apicheck.Base{Rev: "v1.0.0-rc.1", Commit: testrepo.Git(t, root, "rev-parse", "HEAD~2"), Version: "v1.0.0-rc.1", Tagged: true}, r.Base)
	require.Equal(t, []string{"example.com/tiny/extra: X: removed"}, r.Incompatible, out)
	require.Equal(t, "lib/sub/v1.0.0-rc.1", byPath(t, res, "example.com/tiny/lib/sub").Base.Rev)
	require.Len(t, apicheck.Refusals(res, "v1.0.0"), 1, "v1.0.0 keeps rc.1's API")
	require.Contains(t, out, "example.com/tiny: base v1.0.0-rc.1: 1 incompatible")

	// Once tagged at the change, nothing is left to report.
	testrepo.Git(t, root, "tag", "v1.0.0", "HEAD")
	res, out = check(t, root)
	require.Empty(t, byPath(t, res, "example.com/tiny").Incompatible, out)
}

// A removed package is incompatible; one carved out into a module of its
// own is compared there, with its API at the base (not a removal, and the
// new module is "new"); a new module with new packages has nothing to
// compare.
func TestCheckPackagesMovedAndRemoved(t *testing.T) {
	t.Parallel()
	root, _ := newRepo(t)
	require.NoError(t, os.Remove(filepath.Join(root, "extra", "extra.go")))
	testrepo.Commit(t, root, "carve extra out, add lib/other", map[string]string{
		"extra/go.mod":     "module example.com/tiny/extra\n\ngo 1.26.0\n",
		"extra/x.go":       "package extra\n\n// X is extra.\nfunc X() int64 { return 1 }\n",
		"lib/other/go.mod": "module example.com/tiny/lib/other\n\ngo 1.26.0\n",
		"lib/other/o.go":   "package other\n\n// O is new.\nfunc O() {}\n",
	})
	res, out := check(t, root)
	rootRes := byPath(t, res, "example.com/tiny")
	require.Empty(t, rootRes.Incompatible, out)
	require.Equal(t, []string{"example.com/tiny/extra: moved to module example.com/tiny/extra"}, rootRes.Notes, out)
	extra := byPath(t, res, "example.com/tiny/extra")
	require.True(t, extra.New)
	require.Len(t, extra.Incompatible, 1, out)
	require.True(t, strings.HasPrefix(extra.Incompatible[0], "example.com/tiny/extra: X: changed from func() int to func() int64"), out)
	other := byPath(t, res, "example.com/tiny/lib/other")
	require.True(t, other.New)
	require.Empty(t, other.Incompatible)
	require.Empty(t, other.Compatible)
	require.Contains(t, out, "example.com/tiny/lib/other: base ")
	require.Contains(t, out, "new module\n")

	require.NoError(t, os.RemoveAll(filepath.Join(root, "extra")))
	testrepo.Commit(t, root, "drop extra altogether", nil)
	res, out = check(t, root)
	require.Equal(t, []string{"example.com/tiny/extra: package removed"}, byPath(t, res, "example.com/tiny").Incompatible, out)
}

// With no tag and no base file there is nothing to compare with: an
// error, not a silent pass.
func TestCheckNeedsABase(t *testing.T) {
	t.Parallel()
	root := testrepo.New(t, tiny())
	_, err := apicheck.Check(context.Background(), apicheck.Options{Root: root})
	require.ErrorContains(t, err, "no release tag v*, and the API base of modules with no release tag")
	require.ErrorContains(t, err, apicheck.BaseFile)

	testrepo.Commit(t, root, "bad base", map[string]string{apicheck.BaseFile: "0123456789abcdef0123456789abcdef01234567 v1\n"})
	_, err = apicheck.Check(context.Background(), apicheck.Options{Root: root})
	require.ErrorContains(t, err, "is not in this repository")

	testrepo.Commit(t, root, "bad base", map[string]string{apicheck.BaseFile: "HEAD\n"})
	_, err = apicheck.Check(context.Background(), apicheck.Options{Root: root})
	require.ErrorContains(t, err, `want one line "COMMIT VERSION"`)
}
