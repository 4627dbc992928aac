package pgoutbox_test

import (
	"context"
	"errors"

	"github.com/dedup-go/dedup/outbox"
)

// isPermanent reports a refusal for good.
func isPermanent(err error) bool { return errors.Is(err, outbox.ErrPermanent) }

// publisherFunc adapts a function to outbox.Publisher.
type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }
