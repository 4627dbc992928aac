package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testRedisURLs: the forms of --redis that go-redis's ParseURL,
// ParseClusterURL and ParseFailoverURL accept reach the same records,
// whether --redis-mode says which or auto finds out; a Sentinel's address
// without master_name is a usage error, not a store that fails later.
func testRedisURLs(t *testing.T, b backend) {
	switch b.name {
	case "cluster":
		s, flags := b.fresh(t)
		prefix := flags[3]
		for i := range 20 {
			completed(t, s, "u:"+string(rune('a'+i)), nil)
		}
		for _, args := range [][]string{
			{"--redis", "redis://" + b.nodes[0]},                                                    // auto: asks the node
			{"--redis", "redis://" + b.nodes[1] + "?addr=" + b.nodes[2]},                            // auto: addr means a Cluster
			{"--redis", "redis://" + b.nodes[2], "--redis-mode", "cluster"},                         // said
			{"--redis", "redis://" + b.nodes[0] + "?addr=" + b.nodes[1], "--redis-mode", "cluster"}, // said, with addr
		} {
			r := run(t, with(args, "--prefix", prefix, "-o", "json", "scan")...)
			require.Equal(t, 0, r.code, "%q: %s", args, r.err)
			assert.Len(t, lines[recordJSON](t, r.out), 20, "%q: every master is scanned", args)
		}
		// A single-node client of a Cluster node sees its slots only.
		r := run(t, "--redis", "redis://"+b.nodes[0], "--redis-mode", "single", "--prefix", prefix, "-o", "json", "scan")
		require.Equal(t, 0, r.code, r.err)
		assert.Less(t, len(lines[recordJSON](t, r.out)), 20, "the records are spread over the masters")
	case "sentinel":
		s, flags := b.fresh(t)
		prefix := flags[3]
		completed(t, s, "u:1", nil)
		r := run(t, "--redis", "redis://"+b.sentinel+"?master_name="+sentinelMaster, "--redis-mode", "sentinel", "--prefix", prefix, "get", "u:1")
		require.Equal(t, 0, r.code, r.err)
		r = run(t, "--redis", "redis://"+b.sentinel, "--prefix", prefix, "get", "u:1")
		assert.Equal(t, ExitUsage, r.code)
		assert.Contains(t, r.err, b.sentinel+" is a Sentinel: add ?master_name=NAME")
		r = run(t, "--redis", "redis://"+b.sentinel, "--redis-mode", "sentinel", "--prefix", prefix, "get", "u:1")
		assert.Equal(t, ExitUsage, r.code)
		assert.Contains(t, r.err, "the URL names no master")
		r = run(t, "--redis", "redis://"+b.sentinel+"?master_name=nosuch", "--prefix", prefix, "--timeout", "2s", "get", "u:1")
		assert.Equal(t, ExitError, r.code)
		assert.Contains(t, r.err, `Redis master "nosuch" of Sentinel `+b.sentinel)
	default:
		t.Skip("for a Cluster and a Sentinel")
	}
}
