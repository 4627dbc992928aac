package idstrategy_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
)

// Payment is a message whose producer assigns an id.
type Payment struct {
	ID     string
	Tenant string
	Number string
}

// Envelope is a message as a broker delivers it: headers and a body.
type Envelope struct {
	Headers map[string]string
	Body    []byte
}

func (e Envelope) header(name string) (string, bool) {
	v, ok := e.Headers[name]
	return v, ok
}

func ExampleField() {
	key := idstrategy.Field("ID", func(p Payment) string { return p.ID })

	id, err := key(Payment{ID: "pay-42"})
	fmt.Println(id, err)

	_, err = key(Payment{})
	fmt.Println(err)
	fmt.Println(errors.Is(err, dedup.ErrNoKey))
	// Output:
	// pay-42 <nil>
	// idstrategy: field "ID": dedup: message has no id: the field is empty
	// true
}

func ExampleComposite() {
	key := idstrategy.Composite(
		idstrategy.Field("Tenant", func(p Payment) string { return p.Tenant }),
		idstrategy.Field("Number", func(p Payment) string { return p.Number }),
	)

	id, _ := key(Payment{Tenant: "acme", Number: "42"})
	fmt.Println(id)

	// A ':' inside a part is escaped, so these two cannot meet.
	a, _ := key(Payment{Tenant: "acme:eu", Number: "42"})
	b, _ := key(Payment{Tenant: "acme", Number: "eu:42"})
	fmt.Println(a, b)

	_, err := key(Payment{Tenant: "acme"})
	fmt.Println(err)
	// Output:
	// acme:42
	// acme\:eu:42 acme:eu\:42
	// idstrategy: composite part 2 of 2: field "Number": dedup: message has no id: the field is empty
}

func ExampleCanonicalJSON() {
	key := idstrategy.CanonicalJSON(func(e Envelope) ([]byte, error) { return e.Body, nil })

	a, _ := key(Envelope{Body: []byte(`{"order":42,"items":[{"sku":"a","qty":1}]}`)})
	b, _ := key(Envelope{Body: []byte(`{ "items": [ {"qty": 1, "sku": "\u0061"} ], "order": 42 }`)})
	fmt.Println(a == b)
	// The SHA-256 of {"items":[{"qty":1,"sku":"a"}],"order":42}.
	fmt.Println(a)

	_, err := key(Envelope{Body: []byte(`{"order":42,"order":43}`)})
	fmt.Println(err)
	// Output:
	// true
	// json-sha256:db7043edfc437fc42ba6f35a835c91627089b137b72efa03e8f140319facded5
	// idstrategy: canonical JSON: dedup: invalid message id: at byte 22: duplicate key "order" in the object ending here
}

func ExampleFirstOf() {
	// The Message-Id header where the producer sets one, else the body.
	key := idstrategy.FirstOf(
		idstrategy.Header("Message-Id", Envelope.header),
		idstrategy.ContentHash(func(e Envelope) ([]byte, error) { return e.Body, nil }),
	)

	id, _ := key(Envelope{Headers: map[string]string{"Message-Id": "m-1"}, Body: []byte("hello")})
	fmt.Println(id)
	id, _ = key(Envelope{Body: []byte("hello")})
	fmt.Println(id)

	// A broken header is an error, not a reason to fall back to the body.
	_, err := key(Envelope{Headers: map[string]string{"Message-Id": "m-\xff"}, Body: []byte("hello")})
	fmt.Println(errors.Is(err, dedup.ErrInvalidKey))

	_, err = key(Envelope{})
	fmt.Println(err)
	// Output:
	// m-1
	// sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	// true
	// idstrategy: first of: dedup: message has no id: none of 2 strategies found one: header "Message-Id": the header is missing; content hash: the body is empty
}

// OrderPlaced and RefundIssued are two kinds of message on one stream.
type (
	OrderPlaced  struct{ OrderID string }
	RefundIssued struct{ RefundID string }
)

func ExampleByGoType() {
	key := idstrategy.ByGoType(
		idstrategy.Case(idstrategy.Field("OrderID", func(o OrderPlaced) string { return "order-" + o.OrderID })),
		idstrategy.Case(idstrategy.Field("RefundID", func(r RefundIssued) string { return "refund-" + r.RefundID })),
	)

	for _, msg := range []any{OrderPlaced{OrderID: "7"}, RefundIssued{RefundID: "7"}, "a string"} {
		id, err := key(msg)
		fmt.Println(id, err)
	}
	// Output:
	// order-7 <nil>
	// refund-7 <nil>
	//  idstrategy: by Go type: dedup: message has no id: no case for type string
}

func ExampleWindowed() {
	type Report struct {
		Name        string
		RequestedAt time.Time
	}
	// One daily report per day, however often it is requested.
	key := idstrategy.Windowed(
		idstrategy.Field("Name", func(r Report) string { return r.Name }),
		24*time.Hour,
		func(r Report) time.Time { return r.RequestedAt },
	)

	morning, _ := key(Report{Name: "sales", RequestedAt: time.Date(2024, 5, 1, 8, 0, 0, 0, time.UTC)})
	evening, _ := key(Report{Name: "sales", RequestedAt: time.Date(2024, 5, 1, 20, 0, 0, 0, time.UTC)})
	nextDay, _ := key(Report{Name: "sales", RequestedAt: time.Date(2024, 5, 2, 8, 0, 0, 0, time.UTC)})
	fmt.Println(morning, morning == evening)
	fmt.Println(nextDay)
	// Output:
	// sales@2024-05-01T00:00:00Z true
	// sales@2024-05-02T00:00:00Z
}

func ExampleHashLong() {
	field := idstrategy.Field("ID", func(p Payment) string { return p.ID })
	long := Payment{ID: strings.Repeat("x", 1000)}

	_, err := field(long)
	fmt.Println(errors.Is(err, dedup.ErrInvalidKey))

	id, _ := idstrategy.HashLong(field, 128)(long)
	fmt.Println(id)
	// Output:
	// true
	// sha256:44f8354494a5ba03ba1792a8d3e9c534c47a9181980fde7a3f44b06ef2ae7c7f
}

// Order is the body of the examples' messages.
type Order struct {
	OrderID string `json:"order_id"`
}

func ExampleBodyField() {
	// Whichever broker delivered it, the order number in the body is the id.
	key := idstrategy.BodyField("OrderID", func(o Order) string { return o.OrderID })

	fromKafka := &dedup.Message[Order]{Body: Order{OrderID: "ord-42"}, Broker: "kafka", Stream: "orders", Offset: 1042}
	fromRabbitMQ := &dedup.Message[Order]{Body: Order{OrderID: "ord-42"}, Broker: "rabbitmq", ID: "m-1"}
	a, _ := key(fromKafka)
	b, _ := key(fromRabbitMQ)
	fmt.Println(a, b)

	_, err := key(&dedup.Message[Order]{Broker: "kafka"})
	fmt.Println(err)
	// Output:
	// ord-42 ord-42
	// idstrategy: field "OrderID": dedup: message has no id: the field is empty
}

func ExampleFirstOf_message() {
	// The Idempotency-Key header where the producer sets one, else the raw
	// body: one rule for every broker's messages.
	key := idstrategy.FirstOf(
		idstrategy.MessageHeader[Order]("Idempotency-Key"),
		idstrategy.DataHash[Order](),
	)

	withHeader := &dedup.Message[Order]{
		Data:   []byte("hello"),
		Header: delivery.MapHeader{"Idempotency-Key": {"k-1"}},
		Broker: "nats",
	}
	id, _ := key(withHeader)
	fmt.Println(id)

	// Names are matched exactly: this header is not Idempotency-Key.
	otherCase := &dedup.Message[Order]{
		Data:   []byte("hello"),
		Header: delivery.MapHeader{"idempotency-key": {"k-1"}},
		Broker: "nats",
	}
	id, _ = key(otherCase)
	fmt.Println(id)

	_, err := key(&dedup.Message[Order]{Broker: "kafka"})
	fmt.Println(err)
	// Output:
	// k-1
	// sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	// idstrategy: first of: dedup: message has no id: none of 2 strategies found one: header "Idempotency-Key": the header is missing; content hash: the body is empty
}
