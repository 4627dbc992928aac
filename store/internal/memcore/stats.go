package memcore

// Stats is a snapshot of a Store's size and of what it had to forget.
type Stats struct {
	// Len is the number of completed and failed records held. Expiry is
	// lazy, so it includes expired records not yet touched or evicted.
	Len int
	// InFlight is the number of processing records, including claims whose
	// lease expired that no Acquire has taken over or swept yet.
	InFlight int
	// Capacity is the bound of Len, and separately of InFlight, as
	// configured: for the whole store, however it is cut into shards.
	Capacity int
	// Evictions counts completed records evicted for room before their
	// retention ended: each one is a key whose duplicate would run the
	// handler again. Evicted failed records and expired ones are not
	// counted.
	Evictions uint64
}

// Stats returns the store's current Stats.
func (s *Store) Stats() Stats {
	st := Stats{Capacity: int(s.capacity)}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Len += sh.settled.len()
		st.InFlight += len(sh.claims)
		st.Evictions += sh.evictions
		sh.mu.Unlock()
	}
	return st
}
