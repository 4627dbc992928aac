// Package ctxkey holds the context keys that package dedup shares with
// the packages around it (adapter), so that none of them has to
// export a key.
package ctxkey

// OriginFill is the key under which adapter.WithOrigin puts its
// func(delivery.Origin) delivery.Origin.
type OriginFill struct{}
