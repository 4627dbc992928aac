package redisstore_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// seenKey is the key of a context value that spyHook looks for.
type seenKey struct{}

// spyHook records, for every command a client sends, the value of seenKey
// in its context and how long its context's deadline left it.
type spyHook struct {
	mu   sync.Mutex
	seen []spied
}

type spied struct {
	name     string
	value    any
	deadline bool
	left     time.Duration
}

func (h *spyHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *spyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		end, ok := ctx.Deadline()
		h.mu.Lock()
		h.seen = append(h.seen, spied{name: cmd.Name(), value: ctx.Value(seenKey{}), deadline: ok, left: time.Until(end)})
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *spyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *spyHook) take() []spied {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen
	h.seen = nil
	return s
}

// TestCallsKeepTheCallersValues: the context a call gives the client
// carries the caller's values (a tracing span, which a hook on the client
// reads) and a deadline within Options.Timeout, whether the caller's
// context can be cancelled or not (the shared deadline, see bound.go), and
// when the caller's own deadline is later.
func TestCallsKeepTheCallersValues(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	c := redistest.Client(t)
	s := newStore(t, c, &redisstore.Options{Timeout: timeout})
	hook := new(spyHook)
	c.AddHook(hook)

	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	for name, parent := range map[string]context.Context{
		"no cancel":      context.Background(),
		"cancellable":    cancellable,
		"detached":       context.WithoutCancel(cancellable),
		"later deadline": later,
	} {
		ctx := context.WithValue(parent, seenKey{}, name)
		key := "values:" + name
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: time.Minute}))
		require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: claim.Token, Result: []byte("ok"), Retention: time.Minute}))
		other, err := s.Acquire(ctx, store.AcquireRequest{Key: key + ":released", Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key + ":released", Token: other.Token, Error: "boom", Retention: time.Minute}))

		seen := hook.take()
		require.Len(t, seen, 5, name)
		for _, sp := range seen {
			require.Equal(t, name, sp.value, "%s: %s lost the caller's value", name, sp.name)
			require.True(t, sp.deadline, "%s: %s has no deadline", name, sp.name)
			require.LessOrEqual(t, sp.left, timeout, "%s: %s may run longer than Options.Timeout", name, sp.name)
		}
	}
}

// TestSharedDeadlineRenewed: a call made after the shared deadline of
// earlier calls has passed gets a deadline of its own, not the one that
// ended.
func TestSharedDeadlineRenewed(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	s := newStore(t, redistest.Client(t), &redisstore.Options{Timeout: timeout})
	ctx := context.Background()
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "renewed", Lease: time.Minute})
	require.NoError(t, err)
	time.Sleep(2 * timeout) // the deadline the claim was made under has passed
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "renewed", Token: claim.Token, Retention: time.Minute}))
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "renewed-2", Lease: time.Minute})
	require.NoError(t, err)
}
