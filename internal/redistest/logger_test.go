package redistest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const dialChildEnv = "DEDUP_REDISTEST_DIAL_CHILD"

// TestDialFailuresAreQuiet: a test binary whose client dials a dead server
// writes none of go-redis's "failed to dial" lines, unless
// DEDUP_TEST_REDIS_LOG=1 asks for them (which shows the check can fail).
func TestDialFailuresAreQuiet(t *testing.T) {
	if os.Getenv(dialChildEnv) == "1" {
		dialDeadServer(t)
		return
	}
	for _, tc := range []struct {
		env  string
		want bool
	}{{env: "", want: false}, {env: "1", want: true}} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDialFailuresAreQuiet$", "-test.count=1")
		cmd.Env = append(os.Environ(), dialChildEnv+"=1", LogEnv+"="+tc.env)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if got := strings.Contains(string(out), "failed to dial"); got != tc.want {
			t.Fatalf("%s=%q: go-redis's dial failures in the output: %v, want %v\n%s", LogEnv, tc.env, got, tc.want, out)
		}
	}
}

// dialDeadServer pings a port nothing listens on, through go-redis's retries.
func dialDeadServer(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a ping of a dead server succeeded")
	}
}
