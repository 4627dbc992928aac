package store

import (
	"context"
	"sync/atomic"
	"time"
)

// HeldClaim is the claim a handler runs under, reachable from the handler's
// context through ClaimFromContext. A store that can complete the record inside the handler's own
// transaction (pgstore.CompleteTx) reads the key, token and retention here
// and calls MarkCompleted, so the receiver does not complete it again.
type HeldClaim struct {
	// Key is the record's key.
	Key string
	// Token fences the claim.
	Token Token
	// Attempt is the claim's attempt number, 1 for the first.
	Attempt int
	// Retention is how long the receiver keeps completed records.
	Retention time.Duration

	// state is the completed mark (its lowest bit) and, above it, the
	// count of StepsRolledBack: one word, so that a HeldClaim, which every
	// new message's handler context holds, takes 56 bytes and the context
	// 96, one size class less (docs/performance.md).
	state atomic.Uint64
}

// The parts of HeldClaim.state: the bit MarkCompleted sets, and the unit
// of the count of StepsRolledBack above it.
const (
	heldCompleted = 1 << iota
	heldRollback
)

// MarkCompleted records that the handler completed the record itself, with
// this claim's token. The receiver then skips its own Complete.
func (h *HeldClaim) MarkCompleted() { h.state.Or(heldCompleted) }

// Completed reports whether MarkCompleted was called.
func (h *HeldClaim) Completed() bool { return h.state.Load()&heldCompleted != 0 }

// heldKey is the context key of a HeldClaim.
type heldKey struct{}

// ContextWithClaim returns ctx carrying h.
func ContextWithClaim(ctx context.Context, h *HeldClaim) context.Context {
	return context.WithValue(ctx, heldKey{}, h)
}

// ClaimFromContext returns the claim the handler running under ctx holds,
// or false outside a handler.
func ClaimFromContext(ctx context.Context) (*HeldClaim, bool) {
	h, ok := ctx.Value(heldKey{}).(*HeldClaim)
	return h, ok && h != nil
}
