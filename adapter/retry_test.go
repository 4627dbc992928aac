package adapter_test

import (
	"testing"
	"time"

	"github.com/dedup-go/dedup/adapter"
)

func TestRetryName(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500 * time.Millisecond:  "orders.retry.500ms",
		1500 * time.Millisecond: "orders.retry.1.5s",
		5 * time.Second:         "orders.retry.5s",
		5 * time.Minute:         "orders.retry.5m",
		90 * time.Second:        "orders.retry.1m30s",
		time.Hour:               "orders.retry.1h",
		90 * time.Minute:        "orders.retry.1h30m",
		25 * time.Hour:          "orders.retry.25h",
	} {
		if got := adapter.RetryName("orders", d); got != want {
			t.Errorf("RetryName(orders, %v) = %q, want %q", d, got, want)
		}
	}
}
