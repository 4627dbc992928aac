package dedup_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
)

// lockedLog is a log the receiver writes to from any goroutine.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDeadLetterLogged: every dead letter an adapter carried out is logged
// at warn level by the receiver, Observer or not, with its reason,
// namespace, key (the broker's message id when no key was derived) and
// error, and never the body; one whose dead letter failed is not (the
// adapter logs that), nor a delivery acknowledged.
func TestDeadLetterLogged(t *testing.T) {
	t.Parallel()
	for _, observed := range []bool{false, true} {
		t.Run(map[bool]string{false: "NoObserver", true: "Observer"}[observed], func(t *testing.T) {
			t.Parallel()
			var logs lockedLog
			cfg := &dedup.Config{Namespace: "billing", Clock: clock.NewFake(epoch), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			if observed {
				cfg.Observer = delivery.ObserverFunc(func(context.Context, delivery.Event) {})
			}
			rcv, err := dedup.NewReceiver(newMemstore(t, cfg.Clock), func(m *dedup.Message[order]) (string, error) {
				return m.Body.ID, nil
			}, func(ctx context.Context, m *dedup.Message[order]) (string, error) {
				if m.Body.Amount < 0 {
					return "", dedup.Permanent(errors.New("negative amount"))
				}
				return "ok", ctx.Err()
			}, cfg)
			require.NoError(t, err)
			ctx := t.Context()
			msg := func(id string, amount int) *dedup.Message[order] {
				return &dedup.Message[order]{Body: order{ID: id, Amount: amount}, Data: []byte(`{"secret":"card-4242"}`), ID: "msg-" + id, Broker: "jetstream", Source: "orders.new"}
			}

			d := adapter.Bind(rcv).Deliver(ctx, msg("o-1", -5))
			require.Equal(t, delivery.DeadLetter, d.Decision.Action)
			d.Settled(adapter.Settlement{})
			d = adapter.Bind(rcv).Refused(ctx, msg("", 0), dedup.ErrUndecodable)
			require.Equal(t, delivery.DeadLetter, d.Decision.Action)
			d.Settled(adapter.Settlement{})
			d = adapter.Bind(rcv).Deliver(ctx, msg("o-2", -5))
			d.Settled(adapter.Settlement{Err: errors.New("broker refused the dead letter")})
			d = adapter.Bind(rcv).Deliver(ctx, msg("o-3", 5))
			d.Settled(adapter.Settlement{})

			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(l, "dead-lettered") {
					lines = append(lines, l)
				}
			}
			require.Len(t, lines, 2, "two dead letters carried out; the log:\n%s", logs.String())
			for _, want := range []string{"level=WARN", "reason=permanent-error", "namespace=billing", "key=billing:o-1", "negative amount"} {
				require.Contains(t, lines[0], want)
			}
			for _, want := range []string{"level=WARN", "reason=undecodable", "namespace=billing", "message_id=msg-", "error="} {
				require.Contains(t, lines[1], want)
			}
			require.NotContains(t, logs.String(), "card-4242", "never the body")
		})
	}
}
