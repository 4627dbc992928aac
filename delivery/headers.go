package delivery

// The headers adapters put on the dead letters and retry copies they
// publish: one name per concept on every broker, so that one tool
// (dedupctl, a dashboard, a consumer of dead letters) reads them all. An
// adapter sets those its broker knows; a concept only one broker has
// (RabbitMQ's original exchange, say) is named by that adapter, with the
// same "Dedup-" prefix.
//
// Read them with [LookupHeader], which also finds the names the adapters
// wrote before 1.0 (Dedup-Subject, Dedup-Queue, Dedup-Topic, Dedup-Msg-Id,
// ...): letters and copies published then are still in queues.
const (
	// HeaderReason is the Reason of the decision, e.g. "undecodable".
	HeaderReason = "Dedup-Reason"
	// HeaderError is the text of the error the decision was taken on, on
	// one line.
	HeaderError = "Dedup-Error"
	// HeaderKey is the record's key (namespace, ':', id), when the message
	// had one.
	HeaderKey = "Dedup-Key"
	// HeaderAttempt is the claim's attempt that ended the message, when a
	// claim was made.
	HeaderAttempt = "Dedup-Attempt"
	// HeaderDeliveryCount is the broker's delivery count (Origin's).
	HeaderDeliveryCount = "Dedup-Delivery-Count"
	// HeaderSource is where the message was consumed from (Origin.Source):
	// the subject, the queue, the topic.
	HeaderSource = "Dedup-Source"
	// HeaderStream, HeaderPartition and HeaderOffset locate the original in
	// its log (Origin's Stream, Partition and Offset): the JetStream
	// stream and sequence, the Kafka topic, partition and offset.
	HeaderStream    = "Dedup-Stream"
	HeaderPartition = "Dedup-Partition"
	HeaderOffset    = "Dedup-Offset"
	// HeaderConsumerGroup is Origin.ConsumerGroup: the JetStream consumer,
	// the Kafka consumer group.
	HeaderConsumerGroup = "Dedup-Consumer-Group"
	// HeaderOriginalMessageID is the producer's message id of the original
	// (Origin.MessageID), when it had one.
	HeaderOriginalMessageID = "Dedup-Original-Message-Id"
	// HeaderDeadLetteredAt is when the dead letter was published, in
	// RFC 3339 with milliseconds (time.RFC3339Nano cut to milliseconds:
	// "2006-01-02T15:04:05.000Z07:00").
	HeaderDeadLetteredAt = "Dedup-Dead-Lettered-At"
)

// formerHeaders are the names adapters wrote before 1.0, by the name of
// their concept now.
var formerHeaders = map[string][]string{
	HeaderSource:            {"Dedup-Subject", "Dedup-Queue", "Dedup-Topic"},
	HeaderOffset:            {"Dedup-Sequence"},
	HeaderConsumerGroup:     {"Dedup-Consumer", "Dedup-Group"},
	HeaderOriginalMessageID: {"Dedup-Msg-Id", "Dedup-Message-Id"},
}

// LookupHeader returns the value of the header name in h, or, when h has
// none, of a name the adapters used for the same concept before 1.0 (a
// dead letter published by 0.1 names its source Dedup-Subject,
// Dedup-Queue or Dedup-Topic; LookupHeader(h, HeaderSource) finds it). A
// nil h has no header.
func LookupHeader(h Header, name string) (string, bool) {
	if h == nil {
		return "", false
	}
	if v, ok := h.Get(name); ok {
		return v, true
	}
	for _, former := range formerHeaders[name] {
		if v, ok := h.Get(former); ok {
			return v, true
		}
	}
	return "", false
}
