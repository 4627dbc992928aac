package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedriveRedisStreamUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no stream", []string{"redrive", "redisstream", "--redis", "redis://127.0.0.1:6379"}, "no dead-letter stream: give --stream"},
		{"no redis", []string{"redrive", "redisstream", "--stream", "orders.dlq", "--postgres", "postgres://x@127.0.0.1/db"}, "no Redis for the streams: give --stream-redis URL ($DEDUP_STREAM_REDIS_URL)"},
		{"same fields", []string{"redrive", "redisstream", "--stream", "orders.dlq", "--redis", "redis://127.0.0.1:6379", "--id-field", "data"}, `--data-field and --id-field are both "data"`},
		{"bad limit", []string{"redrive", "redisstream", "--stream", "orders.dlq", "--redis", "redis://127.0.0.1:6379", "--limit", "-1"}, "--limit -1"},
		{"no store", []string{"redrive", "redisstream", "--stream", "orders.dlq", "--stream-redis", "redis://127.0.0.1:6379"}, "no store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := redriveRun(t, tc.args...)
			require.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}
