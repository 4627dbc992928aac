package adapter

import (
	"strings"
	"time"
)

// RetryName names the broker object (a RabbitMQ queue, a Kafka topic)
// that holds the retry copies of source's messages for delay: source,
// ".retry.", and delay in Go's duration syntax without its zero units
// ("orders.retry.5s", "orders.retry.5m", "orders.retry.1h", "orders.retry.1h30m",
// "orders.retry.500ms"). Every adapter names its retry tiers so.
func RetryName(source string, delay time.Duration) string {
	return source + ".retry." + tierName(delay)
}

func tierName(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}
