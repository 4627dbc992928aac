package pgstore

import "context"

// CleanupBatch runs one statement of Cleanup, for the test that checks
// that a statement deletes at most Options.CleanupBatchSize rows.
func (s *Store) CleanupBatch(ctx context.Context) (int64, error) { return s.cleanupBatch(ctx) }

// Successor is successor, for its edge cases.
var Successor = successor
