// Package scripts holds the tests of the project's own shell scripts.
package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGo stands for the go command: `go test` fails in a module whose
// directory is named "broken"; everything else succeeds and prints nothing.
const fakeGo = `#!/bin/sh
if [ "$1" = test ] && [ "$(basename "$PWD")" = broken ]; then
	echo "--- FAIL: TestSomething"
	exit 1
fi
exit 0
`

// TestRunsEveryModuleAndSummarises (lint and the release and docs checks
// skipped: they read the real tree): scripts/test.sh (what `make test`
// runs) goes on past a failing module, prints every module's result in its
// summary, and exits non-zero.
func TestRunsEveryModuleAndSummarises(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "go")
	if err := os.WriteFile(fake, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, name := range []string{"first", "broken", "last"} {
		m := filepath.Join(dir, name)
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./test.sh", mods...)
	// deps-check.sh calls go by name: the fake stands in there too.
	cmd.Env = append(os.Environ(), "GO="+fake, "PATH="+dir+":"+os.Getenv("PATH"), "TEST_SKIP=lint release-check docs-check api-budget api-check")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("test.sh exited 0 with a failing module:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("test.sh did not finish: %v\n%s", ctx.Err(), out)
	}
	_, summary, ok := strings.Cut(string(out), "== summary")
	if !ok {
		t.Fatalf("no summary:\n%s", out)
	}
	for _, want := range []string{
		"skip  lint", "ok    deps-check",
		"ok    go test " + mods[0], "FAIL  go test " + mods[1], "ok    go test " + mods[2],
		"skip  release-check", "skip  docs-check", "skip  api-budget", "skip  api-check",
		"steps: 3 passed, 1 failed, 5 skipped",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
}
