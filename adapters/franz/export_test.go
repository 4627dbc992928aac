package dedupfranz

import "github.com/twmb/franz-go/pkg/kgo"

// Client returns c's client (nil before Start), for the tests.
func Client[T, R any](c *Consumer[T, R]) *kgo.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.client
}

// OnRebalance makes c call f at the end of each of its group callbacks
// ("assigned", "revoked", "lost"); set before Start.
func OnRebalance[T, R any](c *Consumer[T, R], f func(event string, parts map[string][]int32)) {
	c.onRebalance = f
}

// Buffered returns how many records wait in the queue of the partition
// (0 when it is not owned).
func Buffered[T, R any](c *Consumer[T, R], topic string, part int32) int {
	c.mu.Lock()
	p := c.parts[tp{topic, part}]
	c.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.buffered()
}
