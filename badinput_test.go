package dedup_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestBadMessages: each bad message is a clear error that dead-letters it,
// and the handler never runs for it.
func TestBadMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		id     string
		want   error
		reason delivery.Reason
		text   string
	}{
		{"empty id", "", dedup.ErrNoKey, delivery.ReasonNoKey, "empty"},
		{"1 MB id", strings.Repeat("x", 1<<20), dedup.ErrInvalidKey, delivery.ReasonInvalidKey, "over the limit"},
		{"invalid UTF-8", "order-\xff\xfe", dedup.ErrInvalidKey, delivery.ReasonInvalidKey, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(epoch)
			var calls atomic.Int64
			rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
				calls.Add(1)
				return "ok", nil
			}, &dedup.Config{Clock: clk})
			res, err := rcv.Handle(t.Context(), order{ID: tt.id})
			require.ErrorIs(t, err, tt.want)
			require.Contains(t, err.Error(), tt.text)
			require.Less(t, len(err.Error()), 300, "the error does not echo a huge id")
			d := adapter.Bind(rcv).Decide(res, err)
			require.Equal(t, delivery.DeadLetter, d.Action)
			require.Equal(t, tt.reason, d.Reason)
			require.Zero(t, calls.Load())
		})
	}
}

func TestKeyFuncErrorIsNoKey(t *testing.T) {
	t.Parallel()
	errMissing := errors.New("header Message-Id missing")
	rcv, err := dedup.NewReceiver(newMemstore(t, clock.NewFake(epoch)),
		func(order) (string, error) { return "", errMissing },
		func(ctx context.Context, o order) (string, error) { return "ok", nil }, nil)
	require.NoError(t, err)
	_, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrNoKey)
	require.ErrorIs(t, err, errMissing)
}

func TestNilMessage(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clock.NewFake(epoch)),
		func(o *order) (string, error) { return o.ID, nil },
		func(ctx context.Context, o *order) (string, error) { calls.Add(1); return "ok", nil }, nil)
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), nil)
	require.ErrorIs(t, err, dedup.ErrNoKey)
	require.Contains(t, err.Error(), "nil")
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	require.Zero(t, calls.Load())
}

// unencodable cannot be marshalled to JSON.
type unencodable struct{ C chan int }

// TestResultNotStored: a result the codec cannot encode, or one over the
// size limit, does not lose the effect: the record completes without a
// result, the delivery is acknowledged, and a redelivery is a duplicate.
func TestResultNotStored(t *testing.T) {
	t.Parallel()
	t.Run("codec cannot encode", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(epoch)
		var calls atomic.Int64
		rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (unencodable, error) {
			calls.Add(1)
			return unencodable{C: make(chan int)}, nil
		}, &dedup.Config{Clock: clk})
		res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err, "a done status never comes with an error")
		require.ErrorIs(t, res.Problem, dedup.ErrResultNotStored)
		require.Contains(t, res.Problem.Error(), "encode")
		require.Equal(t, delivery.StatusProcessed, res.Status)
		require.NotNil(t, res.Value.C, "the first caller still gets its value")
		require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(res, err).Action)

		res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusDuplicate, res.Status)
		require.Nil(t, res.Value.C, "duplicates get the zero value")
		require.Equal(t, int64(1), calls.Load())
	})
	t.Run("over the size limit", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(epoch)
		var calls atomic.Int64
		rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
			calls.Add(1)
			return strings.Repeat("r", 2048), nil
		}, &dedup.Config{Clock: clk, MaxResultSize: 1024})
		res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err, "a done status never comes with an error")
		require.ErrorIs(t, res.Problem, dedup.ErrResultNotStored)
		require.Contains(t, res.Problem.Error(), "over MaxResultSize 1024")
		require.Equal(t, delivery.StatusProcessed, res.Status)
		require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(res, err).Action)
		require.Equal(t, uint64(1), rcv.Stats().ResultsNotStored)

		res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusDuplicate, res.Status)
		require.Empty(t, res.Value)
		require.Equal(t, int64(1), calls.Load())
	})
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	st := newMemstore(t, clock.NewFake(epoch))
	h := func(ctx context.Context, o order) (string, error) { return "", nil }
	tests := []struct {
		name string
		cfg  dedup.Config
		text string
	}{
		{"negative lease", dedup.Config{Lease: -time.Second}, "Lease"},
		{"lease below the minimum", dedup.Config{Lease: time.Millisecond}, "at least"},
		{"negative retention", dedup.Config{Retention: -time.Hour}, "Retention"},
		{"negative max attempts", dedup.Config{MaxAttempts: -1}, "MaxAttempts"},
		{"negative result size", dedup.Config{MaxResultSize: -1}, "MaxResultSize"},
		{"negative id length", dedup.Config{MaxIDLength: -1}, "MaxIDLength"},
		{"negative store retry delay", dedup.Config{StoreRetryDelay: -time.Second}, "StoreRetryDelay"},
		{"namespace with a colon", dedup.Config{Namespace: "a:b"}, "Namespace"},
		{"negative store timeout", dedup.Config{StoreTimeout: -time.Second}, "StoreTimeout"},
		{"backoff base zero", dedup.Config{Backoff: dedup.ExponentialBackoff{Max: time.Second}}, "Base"},
		{"backoff base negative", dedup.Config{Backoff: dedup.ExponentialBackoff{Base: -time.Second, Max: time.Second}}, "Base"},
		{"backoff max below base", dedup.Config{Backoff: dedup.ExponentialBackoff{Base: time.Minute, Max: time.Second}}, "Max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dedup.NewReceiver(st, orderID, h, &tt.cfg)
			require.ErrorIs(t, err, dedup.ErrInvalidConfig)
			require.Contains(t, err.Error(), tt.text)
		})
	}
	t.Run("nil arguments", func(t *testing.T) {
		_, err := dedup.NewReceiver[order, string](nil, orderID, h, nil)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig)
		var typedNil *memstore.Store
		_, err = dedup.NewReceiver[order, string](typedNil, orderID, h, nil)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "a typed-nil store")
		_, err = dedup.NewReceiver[order, string](st, nil, h, nil)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig)
		_, err = dedup.NewReceiver[order, string](st, orderID, nil, nil)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	})
	t.Run("zero values take the defaults", func(t *testing.T) {
		rcv, err := dedup.NewReceiver(st, orderID, h, &dedup.Config{})
		require.NoError(t, err)
		require.Equal(t, "default", rcv.Namespace())
		d := adapter.Bind(rcv).Decide(dedup.Result[string]{Attempt: 5}, &dedup.HandlerError{Attempt: 5, Err: errors.New("x")})
		require.Equal(t, delivery.DeadLetter, d.Action, "MaxAttempts defaults to %d", 5)
		require.Equal(t, (24 * time.Hour), rcv.Retention())
		set, err := dedup.NewReceiver(st, orderID, h, &dedup.Config{Retention: time.Hour})
		require.NoError(t, err)
		require.Equal(t, time.Hour, set.Retention())
	})
}

// TestLongIDsThroughStrategies: a 1 MB id from a strategy is poison, unless
// the receiver opted into hashing long ids: then its copies deduplicate.
func TestLongIDsThroughStrategies(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	long := strings.Repeat("x", 1<<20)
	byID := func(o order) string { return o.ID }
	var calls atomic.Int64
	h := func(ctx context.Context, o order) (string, error) { calls.Add(1); return "ok", nil }

	strict, err := dedup.NewReceiver(newMemstore(t, clk), idstrategy.Field("ID", byID), h, &dedup.Config{Clock: clk})
	require.NoError(t, err)
	res, err := strict.Handle(t.Context(), order{ID: long})
	require.ErrorIs(t, err, dedup.ErrInvalidKey)
	require.Equal(t, delivery.DeadLetter, adapter.Bind(strict).Decide(res, err).Action)
	require.Zero(t, calls.Load())

	hashed, err := dedup.NewReceiver(newMemstore(t, clk), idstrategy.HashLong(idstrategy.Field("ID", byID), 128), h, &dedup.Config{Clock: clk})
	require.NoError(t, err)
	first, err := hashed.Handle(t.Context(), order{ID: long})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, first.Status)
	require.Less(t, len(first.Key), 128+len("default:"))
	again, err := hashed.Handle(t.Context(), order{ID: long})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, again.Status)
	other, err := hashed.Handle(t.Context(), order{ID: long[1:] + "y"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, other.Status, "another long id is another message")
	require.Equal(t, int64(2), calls.Load())
}

func TestKeyFuncPanicIsPoison(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clock.NewFake(epoch)),
		func(o order) (string, error) { return o.ID[:10], nil }, // out of range for short ids
		func(ctx context.Context, o order) (string, error) { calls.Add(1); return "ok", nil }, nil)
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), order{ID: "short"})
	require.ErrorIs(t, err, dedup.ErrInvalidKey)
	var pe *dedup.PanicError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, string(pe.Stack), "badinput_test.go")
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	require.Zero(t, calls.Load())
}

// brokenOrder cannot fingerprint its payload.
type brokenOrder struct{ ID string }

func (brokenOrder) Fingerprint() (string, error) { return "", errors.New("body is not JSON") }

func TestFingerprintErrorIsPoison(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clock.NewFake(epoch)),
		func(o brokenOrder) (string, error) { return o.ID, nil },
		func(ctx context.Context, o brokenOrder) (string, error) { calls.Add(1); return "ok", nil }, nil)
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), brokenOrder{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrUndecodable)
	require.Contains(t, err.Error(), "body is not JSON")
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonUndecodable, d.Reason)
	require.Zero(t, calls.Load())
}
