package dedupfranz

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup/outbox"
)

// HeaderMessageID is the header [StampMessageID] and [OutboxPublisher] put
// the message id in: the same name as dedupkafka's, so that records written
// by either client are keyed alike. Key a receiver on it with
// idstrategy.MessageHeader[T](dedupfranz.HeaderMessageID).
const HeaderMessageID = "Message-Id"

// StampMessageID sets the HeaderMessageID header of every record that has
// none, to newID() (outbox.NewMessageID when newID is nil), in place.
// Records that have one keep it, so stamping again before producing a
// record again changes nothing: both copies carry one id, and a receiver
// keyed on it runs its handler once.
//
// kgo's idempotent producer (its default) already keeps its own retries
// from being stored twice; what it cannot see is the application producing
// a record again (after a timeout, a crash, a restart): stamp before the
// first Produce, and produce the same record again.
func StampMessageID(records []*kgo.Record, newID func() string) {
	if newID == nil {
		newID = outbox.NewMessageID
	}
	for _, r := range records {
		if r == nil {
			continue
		}
		if _, ok := Header(r.Headers).Get(HeaderMessageID); ok {
			continue
		}
		// A fresh slice: the caller's headers may share a backing array
		// between records.
		h := make([]kgo.RecordHeader, len(r.Headers), len(r.Headers)+1)
		copy(h, r.Headers)
		r.Headers = append(h, kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(newID())})
	}
}
