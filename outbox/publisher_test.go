package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/outbox"
)

// TestAcknowledged: which messages of a Publish count as acknowledged,
// for each shape of its error.
func TestAcknowledged(t *testing.T) {
	t.Parallel()
	refused := errors.New("refused")
	require.Equal(t, []bool{true, true}, outbox.Acknowledged(nil, 2))
	require.Equal(t, []bool{false, false}, outbox.Acknowledged(refused, 2))
	be := &outbox.BatchError{Errs: []error{nil, refused, nil}}
	require.Equal(t, []bool{true, false, true}, outbox.Acknowledged(fmt.Errorf("wrapped: %w", be), 3))
	require.Equal(t, []bool{false, false}, outbox.Acknowledged(be, 2), "a BatchError of another call says nothing")
	require.ErrorIs(t, be, refused)
	require.Equal(t, "outbox: 1 of 3 messages not acknowledged: refused", be.Error())
	require.ErrorIs(t, &outbox.BatchError{Errs: []error{context.DeadlineExceeded}}, context.DeadlineExceeded)
}

type codeError struct{ code int }

func (e codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

// TestPermanent: a refusal for good matches ErrPermanent and what it
// wraps, through a BatchError too; other errors do not.
func TestPermanent(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Permanent(nil))
	base := codeError{code: 10}
	p := outbox.Permanent(fmt.Errorf("too large: %w", base))
	require.ErrorIs(t, p, outbox.ErrPermanent)
	var ce codeError
	require.ErrorAs(t, p, &ce)
	require.Equal(t, 10, ce.code)
	require.Equal(t, "too large: code 10", p.Error())
	require.Same(t, p, outbox.Permanent(p), "marked once")
	require.ErrorIs(t, &outbox.BatchError{Errs: []error{nil, p}}, outbox.ErrPermanent)
	require.NotErrorIs(t, errors.New("no stream"), outbox.ErrPermanent)
	sentinel := fmt.Errorf("adapter: cannot be sent (%w)", outbox.ErrPermanent)
	require.ErrorIs(t, fmt.Errorf("msg 3: %w", sentinel), outbox.ErrPermanent)
}
