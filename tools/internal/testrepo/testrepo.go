// Package testrepo makes throwaway git repositories and module
// environments for the tools' tests.
package testrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// New creates a git repository in a temporary directory of t with files
// (slash-separated path to content), committed on branch main, and
// returns its root.
func New(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main")
	for _, kv := range [][2]string{{"user.name", "test"}, {"user.email", "test@example.com"}, {"commit.gpgsign", "false"}, {"tag.gpgsign", "false"}} {
		Git(t, dir, "config", kv[0], kv[1])
	}
	Commit(t, dir, "initial", files)
	return dir
}

// Write writes files into dir.
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Commit writes files into the repository at dir and commits everything.
func Commit(t testing.TB, dir, msg string, files map[string]string) {
	t.Helper()
	Write(t, dir, files)
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
}

// Git runs git in dir and returns its trimmed output; it fails t on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// GoEnv returns the environment for a go command that resolves modules
// only through the proxy directory proxyDir (GOPROXY=file://), into a
// module cache of its own in a temporary directory of t, with no checksum
// database and no workspace.
func GoEnv(t testing.TB, proxyDir string) []string {
	t.Helper()
	return append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxyDir),
		"GOMODCACHE="+t.TempDir(),
		"GOFLAGS=-mod=mod -modcacherw",
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=",
		"GOWORK=off", "GOTOOLCHAIN=local",
	)
}

// Go runs the go command in dir with env and returns its combined output;
// it fails t on error.
func Go(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
