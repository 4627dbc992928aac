package dedupkafka

import "time"

// Marked returns how many of c's partitions have a watermark that is not
// committed yet.
func Marked[T, R any](c *Consumer[T, R]) int {
	c.mu.Lock()
	parts := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		parts = append(parts, p)
	}
	c.mu.Unlock()
	n := 0
	for _, p := range parts {
		p.mu.Lock()
		if p.marked {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// Horizon is horizon, for the tests.
func Horizon(startOffset int64, retention time.Duration) (time.Duration, bool) {
	return horizon(startOffset, retention)
}
