package redistest

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
)

// LogEnv names the environment variable that brings go-redis's own log
// lines back into a test's output.
const LogEnv = "DEDUP_TEST_REDIS_LOG"

// The outage and failover tests make go-redis dial dead servers on
// purpose, and it logs every failed dial ("connection pool: failed to
// dial") to the standard logger: dozens of lines that bury the failure a
// newcomer is looking for. Every test binary that uses this package gets
// them dropped, unless DEDUP_TEST_REDIS_LOG=1. What the library itself
// logs (through slog) is unaffected.
func init() {
	if os.Getenv(LogEnv) != "1" {
		redis.SetLogger(discard{})
	}
}

// discard is a go-redis logger that writes nothing.
type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
