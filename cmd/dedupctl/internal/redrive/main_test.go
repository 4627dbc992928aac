package redrive_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// dedupctl is the path of the tool, built once for the tests that run it
// as a process of its own (to SIGKILL it, to read its real output).
var dedupctl string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dedupctl-redrive-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	dedupctl = filepath.Join(dir, "dedupctl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	build := exec.CommandContext(ctx, "go", "build", "-o", dedupctl, "github.com/dedup-go/dedup/cmd/dedupctl")
	out, err := build.CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build dedupctl: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
