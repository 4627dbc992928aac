package adapter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

type order struct {
	ID string `json:"id"`
}

// A consumer loop of one's own: bind the receiver once, hand each
// delivery over with Deliver (or Refused, for a body that does not
// decode), carry out its Decision, and report it with Settled.
func Example() {
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[order](),
		func(ctx context.Context, m *dedup.Message[order]) (string, error) { return "charged " + m.Body.ID, nil },
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	a := adapter.Bind(rcv) // once, when the consumer is made

	ctx := context.Background()
	for _, in := range []struct{ id, data string }{{"m-1", `{"id":"o-1"}`}, {"m-1", `{"id":"o-1"}`}, {"m-2", `not json`}} {
		m := &dedup.Message[order]{Data: []byte(in.data), ID: in.id, Broker: "mine", Source: "orders"}
		var d adapter.Delivery[string]
		if err := adapter.DecodeBody(dedup.JSONDecoder{}, m); err != nil {
			d = a.Refused(ctx, m, err) // poison: its Decision is a dead letter
		} else {
			d = a.Deliver(ctx, m)
		}
		began := time.Now()
		switch d.Decision.Action { // carry it out on the broker
		case delivery.Ack:
			fmt.Println("ack", d.Result.Status, d.Result.Value)
		case delivery.Retry:
			fmt.Println("retry after", d.Decision.Delay)
		case delivery.DeadLetter:
			fmt.Println("dead letter:", d.Decision.Reason)
		}
		d.Settled(adapter.Settlement{Duration: time.Since(began)})
	}
	fmt.Println("dead letters:", rcv.Stats().DeadLetters[delivery.ReasonUndecodable])
	// Output:
	// ack processed charged o-1
	// ack duplicate charged o-1
	// dead letter: undecodable
	// dead letters: 1
}
