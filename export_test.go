package dedup

import "unsafe"

// HandlerContextSize is the size of the context every new message's
// handler runs under, allocated once a message.
const HandlerContextSize = unsafe.Sizeof(handlerContext{})

// Waiting returns how many deliveries of key wait in r for the first one.
func Waiting[M, R any](r *Receiver[M, R], key string) int { return r.flight.waiting(key) }

// InFlight returns how many keys the deliveries of r are handling now.
func InFlight[M, R any](r *Receiver[M, R]) int {
	n := 0
	for i := range r.flight.buckets {
		b := &r.flight.buckets[i]
		b.mu.Lock()
		for c := b.calls; c != nil; c = c.next {
			n++
		}
		b.mu.Unlock()
	}
	return n
}

// WaitsRemembered returns how many keys r remembers looks in a row for.
func WaitsRemembered[M, R any](r *Receiver[M, R]) int { return int(r.waits.n.Load()) }
