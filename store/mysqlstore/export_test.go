package mysqlstore

import "context"

// CleanupBatch runs one statement of Cleanup, for the test that checks
// that a statement deletes at most Options.CleanupBatchSize rows.
func (s *Store) CleanupBatch(ctx context.Context) (int64, error) { return s.cleanupBatch(ctx) }

// Retried counts the statements and transactions s ran again after a
// deadlock or a lock wait timeout.
func Retried(s *Store) int64 { return s.retried.Load() }

// Successor is successor, for its edge cases.
var Successor = successor

// ClaimSQL is the claim statement of one key: key, token, fingerprint,
// lease (µs), lease plus AbandonedTTL (µs).
func ClaimSQL(s *Store) string { return s.sql.claim(1) }

// InsertSQL is the claim statement of a key without a record: key, token,
// fingerprint, the read's clock, lease (µs), the clock again, lease plus
// AbandonedTTL (µs), the clock again (created_at).
func InsertSQL(s *Store) string { return s.sql.insert }

// StallClaims makes s run stall between each claim statement and the read
// of the rows it left (nil: no stall).
func StallClaims(s *Store, stall func()) { s.claimed = stall }
