package release_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/dedup-go/dedup/tools/internal/apicheck"
	"github.com/dedup-go/dedup/tools/internal/modproxy"
	"github.com/dedup-go/dedup/tools/internal/release"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

const zero = "v0.0.0-00010101000000-000000000000"

// tiny has two library modules (the root and lib/sub, which requires the
// root) and an examples module that requires both; each nested module
// replaces the others with their directories, as the real repository does.
// It has no API base (apicheck.BaseFile): the tests skip the API check but
// TestReleaseAPICheck*.
func tiny() map[string]string {
	return map[string]string{
		"go.mod":  "module example.com/tiny\n\ngo 1.26.0\n",
		"tiny.go": "package tiny\n\n// Greeting greets.\nfunc Greeting() string { return \"hello\" }\n",
		"lib/sub/go.mod": "module example.com/tiny/lib/sub\n\ngo 1.26.0\n\nrequire example.com/tiny " + zero + "\n\n" +
			"// Developed against the root in this repository.\nreplace example.com/tiny => ../..\n",
		"lib/sub/sub.go": "package sub\n\nimport \"example.com/tiny\"\n\n// Hello greets from sub.\nfunc Hello() string { return tiny.Greeting() + \" from sub\" }\n",
		"examples/go.mod": "module example.com/tiny/examples\n\ngo 1.26.0\n\nrequire (\n\texample.com/tiny " + zero + "\n\texample.com/tiny/lib/sub " + zero + "\n)\n\n" +
			"replace (\n\texample.com/tiny => ../\n\texample.com/tiny/lib/sub => ../lib/sub\n)\n",
		"examples/main.go": "package main\n\nimport \"example.com/tiny/lib/sub\"\n\nfunc main() { println(sub.Hello()) }\n",
	}
}

func readMod(t *testing.T, root, dir string) *modfile.File {
	t.Helper()
	p := filepath.Join(root, dir, "go.mod")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	f, err := modfile.Parse(p, b, nil)
	require.NoError(t, err)
	return f
}

func requires(f *modfile.File) map[string]string {
	m := map[string]string{}
	for _, r := range f.Require {
		m[r.Mod.Path] = r.Mod.Version
	}
	return m
}

// A release makes the library modules require the version (keeping their
// replace), commits that, runs the tests on the committed tree, tags each
// library module (not the examples) and prints the push command; the
// tagged modules are then fetchable from a proxy as a user would fetch
// them.
func TestReleaseTagsLibraryModules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testrepo.New(t, tiny())
	before := testrepo.Git(t, root, "rev-parse", "HEAD")
	var out bytes.Buffer
	tested := 0
	err := release.Run(ctx, release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", Out: &out,
		Test: func(ctx context.Context, _ io.Writer) error {
			tested++
			// The tests run on the committed edits.
			require.Empty(t, testrepo.Git(t, root, "status", "--porcelain"))
			require.Equal(t, "v0.1.0", requires(readMod(t, root, "lib/sub"))["example.com/tiny"])
			return nil
		}})
	require.NoError(t, err, out.String())
	require.Equal(t, 1, tested)

	sub := readMod(t, root, "lib/sub")
	require.Equal(t, map[string]string{"example.com/tiny": "v0.1.0"}, requires(sub))
	require.Len(t, sub.Replace, 1, "the replace stays")
	require.Equal(t, map[string]string{"example.com/tiny": zero, "example.com/tiny/lib/sub": zero}, requires(readMod(t, root, "examples")))

	require.Equal(t, before, testrepo.Git(t, root, "rev-parse", "HEAD~1"))
	require.Equal(t, "release v0.1.0: modules require v0.1.0", testrepo.Git(t, root, "log", "-1", "--format=%s"))
	require.Equal(t, "lib/sub/go.mod", testrepo.Git(t, root, "show", "--name-only", "--format=", "HEAD"))
	require.Empty(t, testrepo.Git(t, root, "status", "--porcelain"))

	require.Equal(t, "lib/sub/v0.1.0\nv0.1.0", testrepo.Git(t, root, "tag", "--list"))
	head := testrepo.Git(t, root, "rev-parse", "HEAD")
	for _, tag := range []string{"v0.1.0", "lib/sub/v0.1.0"} {
		require.Equal(t, "tag", testrepo.Git(t, root, "cat-file", "-t", tag), "%s is annotated", tag)
		require.Equal(t, head, testrepo.Git(t, root, "rev-parse", tag+"^{commit}"))
	}
	require.Contains(t, out.String(), "git push origin v0.1.0 lib/sub/v0.1.0\n")

	proxy := t.TempDir()
	require.NoError(t, modproxy.Add(ctx, proxy, root, []modproxy.Version{
		{Path: "example.com/tiny", Version: "v0.1.0", Revision: "v0.1.0"},
		{Path: "example.com/tiny/lib/sub", Version: "v0.1.0", Subdir: "lib/sub", Revision: "lib/sub/v0.1.0"},
	}))
	user := t.TempDir()
	testrepo.Write(t, user, map[string]string{
		"go.mod":  "module example.com/user\n\ngo 1.26.0\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\tsub \"example.com/tiny/lib/sub\"\n)\n\nfunc main() { fmt.Println(sub.Hello()) }\n",
	})
	env := testrepo.GoEnv(t, proxy)
	testrepo.Go(t, user, env, "get", "example.com/tiny/lib/sub@v0.1.0")
	require.Equal(t, "hello from sub\n", testrepo.Go(t, user, env, "run", "."))
}

// A dry run prints the edits and tags and changes nothing.
func TestReleaseDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	root := testrepo.New(t, tiny())
	head := testrepo.Git(t, root, "rev-parse", "HEAD")
	var out bytes.Buffer
	err := release.Run(context.Background(), release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", DryRun: true, Out: &out,
		Test: func(context.Context, io.Writer) error { t.Error("a dry run ran the tests"); return nil }})
	require.NoError(t, err)
	require.Contains(t, out.String(), "edit lib/sub/go.mod: require example.com/tiny "+zero+" -> v0.1.0\n")
	require.Contains(t, out.String(), "tag v0.1.0 (example.com/tiny v0.1.0)\ntag lib/sub/v0.1.0 (example.com/tiny/lib/sub v0.1.0)\n")
	require.NotContains(t, out.String(), "examples/")
	require.Contains(t, out.String(), "dry run: nothing edited, committed or tagged")
	require.Equal(t, head, testrepo.Git(t, root, "rev-parse", "HEAD"))
	require.Empty(t, testrepo.Git(t, root, "status", "--porcelain"))
	require.Empty(t, testrepo.Git(t, root, "tag", "--list"))
}

// A work tree with changes, an existing tag, or a requirement on the
// repository's own module with no replace to its directory is refused
// before anything changes, in a dry run too.
func TestReleaseRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		prepare func(t *testing.T, root string)
		want    string
	}{
		"untracked file": {func(t *testing.T, root string) {
			testrepo.Write(t, root, map[string]string{"notes.txt": "wip"})
		}, "the work tree has changes"},
		"modified file": {func(t *testing.T, root string) {
			testrepo.Write(t, root, map[string]string{"tiny.go": "package tiny\n"})
		}, "the work tree has changes"},
		"tag exists": {func(t *testing.T, root string) {
			testrepo.Git(t, root, "tag", "lib/sub/v0.1.0")
		}, "tag lib/sub/v0.1.0 exists"},
		"no replace": {func(t *testing.T, root string) {
			testrepo.Commit(t, root, "drop replace", map[string]string{
				"lib/sub/go.mod": "module example.com/tiny/lib/sub\n\ngo 1.26.0\n\nrequire example.com/tiny v0.0.1\n",
			})
		}, "lib/sub/go.mod requires example.com/tiny with no replace"},
	} {
		for _, dry := range []bool{false, true} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				root := testrepo.New(t, tiny())
				tc.prepare(t, root)
				head := testrepo.Git(t, root, "rev-parse", "HEAD")
				status := testrepo.Git(t, root, "status", "--porcelain")
				tags := testrepo.Git(t, root, "tag", "--list")
				var out bytes.Buffer
				err := release.Run(context.Background(), release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", DryRun: dry, Out: &out,
					Test: func(context.Context, io.Writer) error { t.Error("tests ran"); return nil }})
				require.ErrorIs(t, err, release.ErrRefused)
				require.ErrorContains(t, err, tc.want)
				require.Equal(t, head, testrepo.Git(t, root, "rev-parse", "HEAD"))
				require.Equal(t, status, testrepo.Git(t, root, "status", "--porcelain"))
				require.Equal(t, tags, testrepo.Git(t, root, "tag", "--list"))
			})
		}
	}
}

// When the tests fail nothing is tagged; the go.mod commit stays, and a
// second run (tests passing) needs no edit and tags.
func TestReleaseTestsFailThenRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testrepo.New(t, tiny())
	boom := errors.New("make test: exit status 2")
	var out bytes.Buffer
	err := release.Run(ctx, release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", Out: &out,
		Test: func(context.Context, io.Writer) error { return boom }})
	require.ErrorIs(t, err, boom)
	require.Empty(t, testrepo.Git(t, root, "tag", "--list"))
	require.Equal(t, "v0.1.0", requires(readMod(t, root, "lib/sub"))["example.com/tiny"])
	require.Empty(t, testrepo.Git(t, root, "status", "--porcelain"))
	head := testrepo.Git(t, root, "rev-parse", "HEAD")

	out.Reset()
	require.NoError(t, release.Run(ctx, release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", Out: &out,
		Test: func(context.Context, io.Writer) error { return nil }}))
	require.Contains(t, out.String(), "every requirement on this repository's modules is v0.1.0 already")
	require.Equal(t, head, testrepo.Git(t, root, "rev-parse", "HEAD"))
	require.Equal(t, "lib/sub/v0.1.0\nv0.1.0", testrepo.Git(t, root, "tag", "--list"))
}

// SkipTests tags without running the tests.
func TestReleaseSkipTests(t *testing.T) {
	t.Parallel()
	root := testrepo.New(t, tiny())
	require.NoError(t, release.Run(context.Background(), release.Options{Root: root, SkipAPICheck: true, Version: "v1.2.3-rc.1", SkipTests: true,
		Test: func(context.Context, io.Writer) error { t.Error("tests ran"); return nil }}))
	require.Equal(t, "lib/sub/v1.2.3-rc.1\nv1.2.3-rc.1", testrepo.Git(t, root, "tag", "--list"))
}

func TestValidateVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"v0.1.0", "v1.0.0", "v0.2.0-rc.1"} {
		require.NoError(t, release.ValidateVersion(v), v)
	}
	for v, want := range map[string]string{
		"":            "not a semantic version",
		"0.1.0":       "not a semantic version",
		"v0.1.0.1":    "not a semantic version",
		"v0.1":        "not canonical: want v0.1.0",
		"v0.1.0+meta": "build metadata",
		"v2.0.0":      "major version v2",
	} {
		err := release.ValidateVersion(v)
		require.ErrorContains(t, err, want, "%q", v)
		err = release.Run(context.Background(), release.Options{Root: t.TempDir(), Version: v})
		require.ErrorContains(t, err, want, "Run %q", v)
	}
}

// Without a Test func the release runs make test in the repository, and a
// failing make test stops it before any tag.
func TestReleaseRunsMakeTest(t *testing.T) {
	t.Parallel()
	for _, pass := range []bool{true, false} {
		files := tiny()
		files["Makefile"] = "test:\n\t@echo make-test-ran-in-$(notdir $(CURDIR))\n"
		if !pass {
			files["Makefile"] += "\t@exit 3\n"
		}
		root := testrepo.New(t, files)
		var out bytes.Buffer
		err := release.Run(context.Background(), release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", Out: &out})
		require.Contains(t, out.String(), "make-test-ran-in-"+filepath.Base(root)+"\n")
		if pass {
			require.NoError(t, err)
			require.Equal(t, "lib/sub/v0.1.0\nv0.1.0", testrepo.Git(t, root, "tag", "--list"))
		} else {
			require.ErrorContains(t, err, "make test: exit status 2")
			require.Empty(t, testrepo.Git(t, root, "tag", "--list"))
		}
	}
}

// A command module (package main at its root) is tagged on a commit of
// its own, a child of the release commit on no branch, whose go.mod has
// none of the replaces the repository builds with: go install PATH@VERSION
// refuses a module with replaces. From a proxy of the tags it installs and
// runs; the branch keeps the replaces.
func TestReleaseTagsCommandWithoutReplaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := tiny()
	files["cmd/hello/go.mod"] = "module example.com/tiny/cmd/hello\n\ngo 1.26.0\n\nrequire (\n\texample.com/tiny " + zero + "\n\texample.com/tiny/lib/sub " + zero + "\n)\n\n" +
		"replace (\n\texample.com/tiny => ../..\n\texample.com/tiny/lib/sub => ../../lib/sub\n)\n"
	files["cmd/hello/main.go"] = "// Command hello greets.\npackage main\n\nimport \"example.com/tiny/lib/sub\"\n\nfunc main() { println(sub.Hello()) }\n"
	root := testrepo.New(t, files)
	var out bytes.Buffer
	require.NoError(t, release.Run(ctx, release.Options{Root: root, SkipAPICheck: true, Version: "v0.1.0", Out: &out, SkipTests: true}), out.String())

	head := testrepo.Git(t, root, "rev-parse", "HEAD")
	require.Len(t, readMod(t, root, "cmd/hello").Replace, 2, "the branch keeps the replaces")
	require.Equal(t, map[string]string{"example.com/tiny": "v0.1.0", "example.com/tiny/lib/sub": "v0.1.0"}, requires(readMod(t, root, "cmd/hello")))
	require.Equal(t, head, testrepo.Git(t, root, "rev-parse", "lib/sub/v0.1.0^{commit}"))
	tagged := testrepo.Git(t, root, "rev-parse", "cmd/hello/v0.1.0^{commit}")
	require.NotEqual(t, head, tagged)
	require.Equal(t, head, testrepo.Git(t, root, "rev-parse", tagged+"^"), "the command's commit is a child of the release commit")
	require.Equal(t, "cmd/hello/go.mod", testrepo.Git(t, root, "diff", "--name-only", head, tagged), "and changes only its go.mod")
	gomod := testrepo.Git(t, root, "show", "cmd/hello/v0.1.0:cmd/hello/go.mod")
	require.NotContains(t, gomod, "replace")
	require.Contains(t, gomod, "example.com/tiny/lib/sub v0.1.0")
	require.Empty(t, testrepo.Git(t, root, "branch", "--contains", tagged), "no branch holds it")
	require.Contains(t, out.String(), "git push origin v0.1.0 cmd/hello/v0.1.0 lib/sub/v0.1.0\n")

	proxy := t.TempDir()
	require.NoError(t, modproxy.Add(ctx, proxy, root, []modproxy.Version{
		{Path: "example.com/tiny", Version: "v0.1.0", Revision: "v0.1.0"},
		{Path: "example.com/tiny/lib/sub", Version: "v0.1.0", Subdir: "lib/sub", Revision: "lib/sub/v0.1.0"},
		{Path: "example.com/tiny/cmd/hello", Version: "v0.1.0", Subdir: "cmd/hello", Revision: "cmd/hello/v0.1.0"},
	}))
	bin := t.TempDir()
	env := append(testrepo.GoEnv(t, proxy), "GOBIN="+bin)
	testrepo.Go(t, t.TempDir(), env, "install", "example.com/tiny/cmd/hello@latest")
	got, err := exec.CommandContext(ctx, filepath.Join(bin, "hello")).CombinedOutput()
	require.NoError(t, err, string(got))
	require.Equal(t, "hello from sub\n", string(got))
}

// withAPIBase adds to the tiny repository a type R with two methods, and
// the commit naming that state the v1 surface (apicheck.BaseFile); it
// returns the root and the base commit.
func withAPIBase(t *testing.T) (string, string) {
	t.Helper()
	root := testrepo.New(t, tiny())
	testrepo.Commit(t, root, "R", map[string]string{
		"r.go": "package tiny\n\n// R receives.\ntype R struct{}\n\n// Lease leases.\nfunc (*R) Lease() {}\n\n// Other stays.\nfunc (*R) Other() {}\n",
	})
	base := testrepo.Git(t, root, "rev-parse", "HEAD")
	testrepo.Commit(t, root, "api base", map[string]string{apicheck.BaseFile: base + " v1\n"})
	return root, base
}

func dropLease(t *testing.T, root string) {
	t.Helper()
	testrepo.Commit(t, root, "drop R.Lease", map[string]string{
		"r.go": "package tiny\n\n// R receives.\ntype R struct{}\n\n// Other stays.\nfunc (*R) Other() {}\n",
	})
}

// The release compares each library module with its base and prints the
// changes: with no incompatible change it goes on; a removed method under
// a minor or patch version of the base's major (v1) is refused, naming
// the module and the change, in a dry run too, before anything changes.
func TestReleaseAPICheckRefusesABreakUnderAMinor(t *testing.T) {
	t.Parallel()
	root, base := withAPIBase(t)
	var out bytes.Buffer
	require.NoError(t, release.Run(context.Background(), release.Options{Root: root, Version: "v1.0.0-rc.1", DryRun: true, Out: &out}), out.String())
	require.Contains(t, out.String(), "api check: each library module against its latest tag, or "+apicheck.BaseFile+" while it has none\n")
	require.Contains(t, out.String(), "example.com/tiny: base "+base[:12]+" ("+apicheck.BaseFile+", v1): no API change\n")
	require.Contains(t, out.String(), "example.com/tiny/lib/sub: base "+base[:12]+" ("+apicheck.BaseFile+", v1): no API change\n")

	dropLease(t, root)
	head := testrepo.Git(t, root, "rev-parse", "HEAD")
	for _, v := range []string{"v1.1.0", "v1.0.1", "v1.0.0"} {
		for _, dry := range []bool{true, false} {
			out.Reset()
			err := release.Run(context.Background(), release.Options{Root: root, Version: v, DryRun: dry, Out: &out,
				Test: func(context.Context, io.Writer) error { t.Error("tests ran"); return nil }})
			require.ErrorIs(t, err, release.ErrRefused, out.String())
			require.ErrorContains(t, err, "example.com/tiny "+v+" would break the API of its base "+base[:12]+" ("+apicheck.BaseFile+", v1) (an incompatible change needs a new major version)")
			require.ErrorContains(t, err, "example.com/tiny: (*R).Lease: removed")
			require.Contains(t, out.String(), "  incompatible: example.com/tiny: (*R).Lease: removed\n")
			require.Equal(t, head, testrepo.Git(t, root, "rev-parse", "HEAD"))
			require.Empty(t, testrepo.Git(t, root, "tag", "--list"))
			require.Empty(t, testrepo.Git(t, root, "status", "--porcelain"))
		}
	}
}

// Against a release tag, the base is the tag: after v0.3.0 the removed
// method is refused under a patch (v0.3.1), accepted under a v0 minor
// (v0.4.0) and under a new major (v1.0.0), which is released and tagged.
// (A major beyond v1 needs /vN module paths, which ValidateVersion
// refuses; apicheck's own tests show v2.0.0 accepted against a v1 base.)
func TestReleaseAPICheckAcceptsABreakUnderAMajor(t *testing.T) {
	t.Parallel()
	root, _ := withAPIBase(t)
	testrepo.Git(t, root, "tag", "v0.3.0")
	testrepo.Git(t, root, "tag", "lib/sub/v0.3.0")
	dropLease(t, root)

	var out bytes.Buffer
	err := release.Run(context.Background(), release.Options{Root: root, Version: "v0.3.1", DryRun: true, Out: &out})
	require.ErrorIs(t, err, release.ErrRefused)
	require.ErrorContains(t, err, "example.com/tiny v0.3.1 would break the API of its base v0.3.0 (an incompatible change needs a new minor or major version)")
	require.NotContains(t, err.Error(), "lib/sub v0.3.1", "lib/sub has no incompatible change")

	out.Reset()
	require.NoError(t, release.Run(context.Background(), release.Options{Root: root, Version: "v0.4.0", DryRun: true, Out: &out}), out.String())
	require.Contains(t, out.String(), "example.com/tiny: base v0.3.0: 1 incompatible, 0 compatible changes\n  incompatible: example.com/tiny: (*R).Lease: removed\n")

	out.Reset()
	require.NoError(t, release.Run(context.Background(), release.Options{Root: root, Version: "v1.0.0", SkipTests: true, Out: &out}), out.String())
	require.Equal(t, "lib/sub/v0.3.0\nlib/sub/v1.0.0\nv0.3.0\nv1.0.0", testrepo.Git(t, root, "tag", "--list"))
}
