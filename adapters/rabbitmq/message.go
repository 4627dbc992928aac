package dedupamqp

import (
	"fmt"
	"iter"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerRabbitMQ is the value of dedup.Message.Broker and
// delivery.Event.Broker for deliveries of this package.
const BrokerRabbitMQ = "rabbitmq"

// headerDeliveryCount is the header a quorum queue sets on a redelivery:
// how many times the message was returned to the queue before (0-based).
const headerDeliveryCount = "x-delivery-count"

// TableHeader is an AMQP headers table behind delivery.Header, without a
// copy: the envelope's Header, and what a program reading dead letters
// with amqp091 itself passes to delivery.LookupHeader, which also finds
// the names dedupamqp 0.1 wrote:
//
//	queue, ok := delivery.LookupHeader(dedupamqp.TableHeader(d.Headers), delivery.HeaderSource)
//
// Names match exactly, case included. Values that are not strings on
// the wire are given as their text: integers and floats in decimal,
// booleans as "true"/"false", timestamps in RFC 3339, byte arrays as their
// bytes, nested tables and arrays in Go's %v form.
type TableHeader amqp.Table

// Get returns the value of name as text, and whether it is present.
func (h TableHeader) Get(name string) (string, bool) {
	v, ok := h[name]
	if !ok {
		return "", false
	}
	return headerText(v), true
}

// All yields every name and its value as text; map order is random.
func (h TableHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, v := range h {
			if !yield(k, headerText(v)) {
				return
			}
		}
	}
}

var _ delivery.Header = TableHeader(nil)

// headerText renders an AMQP field value as text.
func headerText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

// headerInt reads an integer header, whatever integer type the broker or
// producer encoded it with.
func headerInt(h amqp.Table, name string) (int64, bool) {
	switch x := h[name].(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// deliveryCount converts the broker's counters to dedup's 1-based
// convention. A quorum queue's x-delivery-count counts earlier returns of
// the message (absent, or 0, on its first delivery), so the delivery count
// is one more. Without the header: a delivery the broker does not flag as
// redelivered is a first delivery (1); a redelivered one from a classic
// queue, which does not count, is 0 (unknown). A redelivered message is at
// least on its second delivery, also where a broker (RabbitMQ 4 on a Nack)
// did not count the return.
func deliveryCount(d *amqp.Delivery) int {
	n, ok := headerInt(d.Headers, headerDeliveryCount)
	switch {
	case ok && n >= 0 && n < math.MaxInt32:
		c := int(n) + 1
		if d.Redelivered && c < 2 {
			c = 2
		}
		return c
	case d.Redelivered:
		return 0
	default:
		return 1
	}
}

// Native returns the AMQP delivery m was filled from, and false when m
// did not come from a [Consumer]. Read it (its properties, exchange,
// routing key); do not Ack, Nack or Reject it: the Consumer settles every
// delivery after its outcome is recorded, on the channel it came from, and
// a second acknowledgement closes that channel.
func Native[T any](m *dedup.Message[T]) (*amqp.Delivery, bool) {
	if m == nil {
		return nil, false
	}
	d, ok := m.Native.(*amqp.Delivery)
	return d, ok && d != nil
}

// delivered is a delivery with its envelope and the time it arrived,
// allocated together: one allocation per delivery.
type delivered[T any] struct {
	env dedup.Message[T]
	d   amqp.Delivery
	// at is when the client received it: from then on, unacknowledged, it
	// is on the clock of the broker's consumer_timeout.
	at time.Time
}

// envelope returns the delivery d from queue, arrived at at, with its
// dedup.Message, whose Native points at the copy of d.
func envelope[T any](d amqp.Delivery, queue string, fingerprint bool, at time.Time) *delivered[T] {
	it := &delivered[T]{d: d, at: at}
	it.env = fill[T](&it.d, queue, fingerprint)
	return it
}

func fill[T any](d *amqp.Delivery, queue string, fingerprint bool) dedup.Message[T] {
	count := deliveryCount(d)
	var h delivery.Header
	if len(d.Headers) > 0 {
		h = TableHeader(d.Headers)
	}
	return dedup.Message[T]{
		Data:            d.Body,
		Header:          h,
		ID:              d.MessageId,
		Source:          queue,
		DeliveryCount:   count,
		Redelivered:     d.Redelivered || count > 1,
		Timestamp:       d.Timestamp,
		Broker:          BrokerRabbitMQ,
		Native:          d,
		FingerprintData: fingerprint,
	}
}
