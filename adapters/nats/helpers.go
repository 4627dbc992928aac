package nats

import (
	"fmt"

	"github.com/dedup-go/dedup"
)

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupnats: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
