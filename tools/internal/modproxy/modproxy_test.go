package modproxy_test

import (
	"archive/zip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/tools/internal/modproxy"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

// tiny is a repository with two modules: the root example.com/tiny and
// example.com/tiny/sub, which requires the root at v0.1.0 and replaces it
// with its directory for development.
var tiny = map[string]string{
	"go.mod":  "module example.com/tiny\n\ngo 1.26.0\n",
	"LICENSE": "license text\n",
	"tiny.go": "package tiny\n\n// Greeting greets.\nfunc Greeting() string { return \"hello\" }\n",
	"sub/go.mod": "module example.com/tiny/sub\n\ngo 1.26.0\n\nrequire example.com/tiny v0.1.0\n\n" +
		"replace example.com/tiny => ../\n",
	"sub/sub.go": "package sub\n\nimport \"example.com/tiny\"\n\n// Hello greets from sub.\nfunc Hello() string { return tiny.Greeting() + \" from sub\" }\n",
}

// A user module gets both modules of a tiny repository from the proxy
// built from its tags, at the tagged content (not the newer HEAD), with
// the root module's zip holding no file of the nested module.
func TestProxyServesTaggedModules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := testrepo.New(t, tiny)
	testrepo.Git(t, src, "tag", "-a", "v0.1.0", "-m", "v0.1.0")
	testrepo.Git(t, src, "tag", "-a", "sub/v0.1.0", "-m", "sub v0.1.0")
	// HEAD moves on after the tags: the proxy must serve the tags.
	testrepo.Commit(t, src, "later", map[string]string{
		"tiny.go": "package tiny\n\n// Greeting greets.\nfunc Greeting() string { return \"changed after the tag\" }\n",
	})

	proxy := t.TempDir()
	require.NoError(t, modproxy.Add(ctx, proxy, src, []modproxy.Version{
		{Path: "example.com/tiny", Version: "v0.1.0", Revision: "v0.1.0"},
		{Path: "example.com/tiny/sub", Version: "v0.1.0", Subdir: "sub", Revision: "sub/v0.1.0"},
	}))
	for _, f := range []string{"example.com/tiny/@v/list", "example.com/tiny/sub/@v/list"} {
		b, err := os.ReadFile(filepath.Join(proxy, f))
		require.NoError(t, err)
		require.Equal(t, "v0.1.0\n", string(b), f)
	}
	info, err := os.ReadFile(filepath.Join(proxy, "example.com/tiny/sub/@v/v0.1.0.info"))
	require.NoError(t, err)
	require.Contains(t, string(info), `"Version":"v0.1.0"`)
	mod, err := os.ReadFile(filepath.Join(proxy, "example.com/tiny/sub/@v/v0.1.0.mod"))
	require.NoError(t, err)
	require.Equal(t, tiny["sub/go.mod"], string(mod))

	zr, err := zip.OpenReader(filepath.Join(proxy, "example.com/tiny/@v/v0.1.0.zip"))
	require.NoError(t, err)
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	require.NoError(t, zr.Close())
	require.ElementsMatch(t, []string{"example.com/tiny@v0.1.0/LICENSE", "example.com/tiny@v0.1.0/go.mod", "example.com/tiny@v0.1.0/tiny.go"}, names)

	user := t.TempDir()
	testrepo.Write(t, user, map[string]string{
		"go.mod":  "module example.com/user\n\ngo 1.26.0\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/tiny/sub\"\n)\n\nfunc main() { fmt.Println(sub.Hello()) }\n",
	})
	env := testrepo.GoEnv(t, proxy)
	testrepo.Go(t, user, env, "get", "example.com/tiny/sub@v0.1.0")
	require.Equal(t, "hello from sub\n", testrepo.Go(t, user, env, "run", "."))
	all := testrepo.Go(t, user, env, "list", "-m", "all")
	require.Equal(t, []string{"example.com/user", "example.com/tiny v0.1.0", "example.com/tiny/sub v0.1.0"}, strings.Split(strings.TrimSpace(all), "\n"))
}

// A second version is added to the module's list, in semver order.
func TestProxyListKeepsVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := testrepo.New(t, tiny)
	testrepo.Git(t, src, "tag", "v0.2.0")
	testrepo.Git(t, src, "tag", "v0.10.0")
	proxy := t.TempDir()
	for _, v := range []string{"v0.10.0", "v0.2.0", "v0.10.0"} {
		require.NoError(t, modproxy.Add(ctx, proxy, src, []modproxy.Version{{Path: "example.com/tiny", Version: v, Revision: v}}))
	}
	b, err := os.ReadFile(filepath.Join(proxy, "example.com/tiny/@v/list"))
	require.NoError(t, err)
	require.Equal(t, "v0.2.0\nv0.10.0\n", string(b))
}

// A version that is not canonical is refused.
func TestProxyRefusesBadVersion(t *testing.T) {
	t.Parallel()
	src := testrepo.New(t, tiny)
	err := modproxy.Add(context.Background(), t.TempDir(), src, []modproxy.Version{{Path: "example.com/tiny", Version: "0.1", Revision: "HEAD"}})
	require.Error(t, err)
}
