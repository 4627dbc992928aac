package dedup

// Waiting returns how many deliveries of key wait in r for the first one.
func Waiting[M, R any](r *Receiver[M, R], key string) int { return r.flight.waiting(key) }
