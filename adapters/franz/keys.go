package dedupfranz

import (
	"fmt"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// MessageKey uses the Kafka record key as the id: the producer's own
// identity for the message when it keys records by entity or event id. A
// record without a key fails with dedup.ErrNoKey, and a key that is not
// valid UTF-8 or is longer than adapter.DefaultMaxIDLength with
// dedup.ErrInvalidKey (poison, dead-lettered); wrap it in
// idstrategy.HashLong for long keys, or key binary ones on something else.
//
// Key on the record key only when it names one message: a key that names an
// entity (a customer, an account) makes every later message of that entity a
// duplicate of the first. Messages that did not come from a [Consumer] fail
// with dedup.ErrNoKey.
func MessageKey[T any]() dedup.KeyFunc[*dedup.Message[T]] {
	return func(m *dedup.Message[T]) (string, error) {
		km, ok := Native(m)
		if !ok {
			return "", fmt.Errorf("%w: record key: the message did not come from a Kafka consumer", dedup.ErrNoKey)
		}
		if len(km.Key) == 0 {
			return "", fmt.Errorf("%w: record key: the record has no key", dedup.ErrNoKey)
		}
		id := string(km.Key)
		if err := adapter.ValidateID(id, adapter.DefaultMaxIDLength); err != nil {
			return "", fmt.Errorf("record key: %w", err)
		}
		return id, nil
	}
}
