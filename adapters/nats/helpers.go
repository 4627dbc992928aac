package nats

import (
	"fmt"

	"github.com/dedup-go/dedup"
)

func noKey(strategy, detail string) error {
	return fmt.Errorf("dedupnats: %s: %w: %s", strategy, dedup.ErrNoKey, detail)
}

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupnats: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
