package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
)

// commandLog is a go-redis hook that notes the name of every command sent,
// pipelined ones included.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (h *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.note(cmd)
		}
		return next(ctx, cmds)
	}
}

// note notes cmd, unless it sets up a new connection (HELLO, CLIENT).
func (h *commandLog) note(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client":
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = append(h.names, strings.ToLower(cmd.Name()))
}

// take returns the commands noted since the last take.
func (h *commandLog) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := strings.Join(h.names, " ")
	h.names = nil
	return s
}

// TestCommandsPerOperation pins what each path costs: a new key, a
// duplicate of a completed message, a claim in flight and a reused key are
// one plain SET (NX GET), no script; only a failed record or an ended
// lease adds the takeover script; a completion is one script.
func TestCommandsPerOperation(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	log := &commandLog{}
	c.AddHook(log)
	ctx := t.Context()
	acquire := func(key, fp string, lease time.Duration) store.Claim {
		t.Helper()
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: fp})
		require.NoError(t, err)
		return claim
	}

	claim := acquire("new", "fp", time.Minute)
	require.True(t, claim.Acquired)
	require.Equal(t, "set", log.take(), "a new key")
	require.Equal(t, store.StateProcessing, acquire("new", "fp", time.Minute).Record.State)
	require.Equal(t, "set", log.take(), "a claim in flight")
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "new", Lease: time.Minute, Fingerprint: "other"})
	require.ErrorIs(t, err, store.ErrKeyReused)
	require.NotErrorIs(t, err, store.ErrUnavailable, "a reused key is no store failure")
	require.Equal(t, "set", log.take(), "a reused key")
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "new", Lease: time.Minute, Fingerprint: "other"}})
	require.ErrorIs(t, out[0].Err, store.ErrKeyReused)
	require.NotErrorIs(t, out[0].Err, store.ErrUnavailable, "a reused key is no store failure")
	require.Equal(t, "set", log.take(), "a reused key in a batch")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "new", Token: claim.Token, Result: []byte("r"), Retention: time.Minute}))
	require.Equal(t, "evalsha", log.take(), "a completion")
	dup := acquire("new", "fp", time.Minute)
	require.Equal(t, "r", string(dup.Record.Result))
	require.Equal(t, "set", log.take(), "a duplicate of a completed message")

	claim = acquire("failed", "", time.Minute)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed", Token: claim.Token, Error: "boom", Retention: time.Minute}))
	log.take()
	retry := acquire("failed", "", time.Minute)
	require.True(t, retry.Acquired)
	require.Equal(t, 2, retry.Record.Attempt)
	require.Equal(t, "set evalsha", log.take(), "a retry of a failed record")

	short := acquire("short", "", time.Millisecond)
	time.Sleep(time.Until(short.Record.LeaseUntil.Add(time.Millisecond)))
	log.take()
	require.True(t, acquire("short", "", time.Minute).Acquired)
	require.Equal(t, "set evalsha", log.take(), "a takeover of an ended lease")

	reqs := []store.AcquireRequest{{Key: "b1", Lease: time.Minute}, {Key: "new", Lease: time.Minute}, {Key: "b2", Lease: time.Minute}}
	for _, o := range s.AcquireBatch(ctx, reqs) {
		require.NoError(t, o.Err)
	}
	require.Equal(t, "set set set", log.take(), "a batch of new keys and a duplicate: one pipeline, no script")
}
