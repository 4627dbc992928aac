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
