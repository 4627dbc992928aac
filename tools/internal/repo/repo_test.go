package repo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/tools/internal/repo"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

// Modules lists the root first, then the nested modules by directory,
// marks those under examples, bench and tools, and the test-only ones, as
// not released, and skips
// testdata, vendor and hidden directories.
func TestModules(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	testrepo.Write(t, root, map[string]string{
		"go.mod":                     "module example.com/r\n",
		"store/pg/go.mod":            "module example.com/r/store/pg\n",
		"adapters/k/go.mod":          "module example.com/r/adapters/k\n",
		"examples/go.mod":            "module example.com/r/examples\n",
		"examples/http/go.mod":       "module example.com/r/examples/http\n",
		"bench/go.mod":               "module example.com/whatever\n",
		"tools/go.mod":               "module example.com/r/tools\n",
		"adapters/k/testdata/go.mod": "module example.com/fixture\n",
		"vendor/x/go.mod":            "module example.com/x\n",
		".hidden/go.mod":             "module example.com/h\n",
		"store/pg/e2e/go.mod":        "// dedup:test-only\n\nmodule example.com/r/store/pg/e2e\n",
		"store/pg/e2e/e2e_test.go":   "package e2e_test\n",
	})
	mods, err := repo.Modules(root)
	require.NoError(t, err)
	require.Equal(t, []repo.Module{
		{Dir: ".", Path: "example.com/r", Library: true},
		{Dir: "adapters/k", Path: "example.com/r/adapters/k", Library: true},
		{Dir: "bench", Path: "example.com/whatever"},
		{Dir: "examples", Path: "example.com/r/examples"},
		{Dir: "examples/http", Path: "example.com/r/examples/http"},
		{Dir: "store/pg", Path: "example.com/r/store/pg", Library: true},
		{Dir: "store/pg/e2e", Path: "example.com/r/store/pg/e2e", TestOnly: true},
		{Dir: "tools", Path: "example.com/r/tools"},
	}, mods)
	require.Equal(t, "v0.1.0", mods[0].Tag("v0.1.0"))
	require.Equal(t, "store/pg/v0.1.0", mods[5].Tag("v0.1.0"))
	require.Len(t, repo.Libraries(mods), 3)
}

// A library module whose path does not match its directory could not be
// found by its tags: refused.
func TestModulesPathMismatch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	testrepo.Write(t, root, map[string]string{
		"go.mod":          "module example.com/r\n",
		"store/pg/go.mod": "module example.com/r/pgstore\n",
	})
	_, err := repo.Modules(root)
	require.ErrorContains(t, err, "module example.com/r/pgstore should be example.com/r/store/pg")
}

// A test-only module holds tests only: a package of it could never be
// used, since it is never released.
func TestModulesTestOnlyHoldsOnlyTests(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	testrepo.Write(t, root, map[string]string{
		"go.mod":                 "module example.com/r\n",
		"store/pg/go.mod":        "module example.com/r/store/pg\n",
		"store/pg/e2e/go.mod":    "// dedup:test-only\nmodule example.com/r/store/pg/e2e\n",
		"store/pg/e2e/a_test.go": "package e2e_test\n",
		"store/pg/e2e/h/h.go":    "package h\n",
	})
	_, err := repo.Modules(root)
	require.ErrorContains(t, err, "h.go: a test-only module")
}
