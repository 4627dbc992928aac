// Package bridge hands package adapter the part of a dedup.Receiver that
// only adapters use, so that the Receiver's own method set stays the
// application developer's. Package dedup sets Port when it is
// initialised; package adapter asserts the value Port returns to an
// interface of its own.
package bridge

import (
	"context"

	"github.com/dedup-go/dedup/delivery"
)

// Port returns the adapter-facing view of r, a *dedup.Receiver, or nil
// for anything else. Set by package dedup's init.
var Port func(r any) any

// ValidateID is dedup's check of a message id. Set by package dedup's
// init.
var ValidateID func(id string, maxLen int) error

// Delivery is one delivery handled for an adapter, before the adapter
// settled it: Res is the receiver's dedup.Result of it.
type Delivery[Res any] struct {
	Result   Res
	Err      error
	Decision delivery.Decision
	// Ctx is the delivery's context: the caller's, with what the
	// Observer's StartDelivery added.
	Ctx context.Context
	// Event is the delivery's event so far; Observed reports whether it is
	// to be handed to the Observer when the delivery is settled.
	Event    delivery.Event
	Observed bool
}
