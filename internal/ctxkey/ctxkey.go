// Package ctxkey holds the context keys that package dedup shares with
// the packages around it (store, adapter), so that none of them has to
// export a key.
package ctxkey

// Claim is the key under which a handler's context carries its
// *store.HeldClaim.
type Claim struct{}

// OriginFill is the key under which adapter.WithOrigin puts its
// func(delivery.Origin) delivery.Origin.
type OriginFill struct{}
