package dedupamqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/outbox"
)

// Errors of the OutboxPublisher. Match them with errors.Is.
var (
	// ErrInvalidMessage: an outbox message cannot be sent over AMQP: its
	// Destination names no routing key or an exchange and key that are
	// not UTF-8 or longer than 255 bytes, its ID is empty or longer than
	// 255 bytes, a header name is longer than 255 bytes, or its body is
	// over OutboxOptions.MaxBodySize. It fails alone, without being
	// published, and fails again every time: the relay cannot send it.
	// The OutboxPublisher's error for it matches outbox.ErrPermanent too,
	// so the relay sets the message aside.
	ErrInvalidMessage = errors.New("dedupamqp: outbox message cannot be published")
	// ErrNoExchange: the exchange an outbox message's Destination names
	// does not exist. The message fails alone, without being published (a
	// publish to it would close the channel, and every message after it in
	// the batch with it).
	ErrNoExchange = errors.New("dedupamqp: exchange not found")
)

// defaultOutboxMaxBodySize is OutboxOptions.MaxBodySize's default:
// RabbitMQ 4's max_message_size (16 MiB; 3.x allowed 128 MiB).
const defaultOutboxMaxBodySize = 16 << 20

// defaultOutboxMaxChannels is OutboxOptions.MaxChannels's default.
const defaultOutboxMaxChannels = 16

// outboxCloseTimeout bounds Close when its context has no deadline.
const outboxCloseTimeout = 10 * time.Second

// OutboxOptions configure an OutboxPublisher. A nil *OutboxOptions means
// all defaults.
type OutboxOptions struct {
	// Dial opens the publisher's connection: at the first Publish, and at
	// the first Publish after the connection was lost. Defaults to
	// DialURL(url) of NewOutboxPublisher's url.
	Dial Dialer

	// MaxBodySize is the largest body published: a message over it fails
	// alone, with ErrInvalidMessage. Set it to the broker's
	// max_message_size: a message over that makes the broker close the
	// channel, which fails every message published after it in the batch,
	// on every try. Defaults to 16 MiB, RabbitMQ 4's max_message_size.
	MaxBodySize int

	// MaxChannels bounds the channels the publisher has open at once:
	// each carries one call at a time, and a call waits for one to be
	// free (at most until its context ends). A pgoutbox relay keeps up to
	// 256 PublishEach calls in flight; without a bound each would open a
	// channel of its own. Keep it under the broker's channel_max.
	// Defaults to 16.
	MaxChannels int
}

// OutboxPublisher is the outbox.Publisher of RabbitMQ. Each message is
// published, mandatory and persistent (delivery mode 2), on a channel in
// confirm mode, to the exchange and routing key its Destination names
// (see [OutboxDestination]: "exchange/routing-key", the parts before and
// after the first slash, or a queue's name alone for the default
// exchange; a queue whose name has a slash is addressed with a leading
// one, "/billing/eu"), with its ID as the AMQP MessageId
// property (where the next Consumer's idstrategy.MessageID finds it) and
// its Header as the headers table, values as strings. Nothing else is
// added: no x- header, which RabbitMQ 3.13 and later ignore when a client
// sets one (a Header named x-... is sent as given: carry nothing a
// consumer needs in one). The OrderingKey is not sent: a channel's
// messages reach a queue in the order published, and the relay publishes
// a key's next message only once the previous one was confirmed.
//
// A message counts as acknowledged once the broker confirmed it and did
// not return it. An unroutable message (no queue bound for its key) is
// returned: it fails alone, with ErrReturned; a nack is ErrNacked; an
// exchange that does not exist is ErrNoExchange, found before publishing
// (exchanges are checked once per connection with a passive declare).
// None of these is a refusal for good: a queue bound or an exchange
// declared later (a consumer deployed after the producer) lets the
// message through, so the relay holds back its key and tries again. Only
// a message that no broker could take as it is (ErrInvalidMessage: a
// malformed destination or id, a body over MaxBodySize) fails with an
// error matching outbox.ErrPermanent, which the relay sets aside.
//
// The messages of a Publish are published at once, then their confirms
// awaited. Concurrent calls publish on channels of their own (an idle one
// is reused, one more is opened when none is idle, up to MaxChannels; a
// call waits for one beyond that), so a return is told apart by the call
// it belongs to.
//
// It is an outbox.AckPublisher: PublishEach is Publish reporting each
// message as its outcome is known, so that a pgoutbox relay publishes a
// key's next message without waiting for the rest of the call (see
// PublishEach for what is reported when).
//
// The publisher owns its connection, and dials it again at the first
// Publish after it was lost (a broker restart, a forced close, a network
// cut): a call that was publishing or awaiting confirms then gets errors
// for the messages not confirmed (matching amqp.ErrClosed), and the next
// call reconnects. Publish returns when its context ends: a confirm not
// received by then fails with the context's error, and when the call was
// blocked writing to the socket or in an exchange check (a broker that
// stopped reading, under a resource alarm), the connection is closed to
// free it, failing the other calls in flight too; the next call dials
// again. Close it when done.
type OutboxPublisher struct {
	dial    Dialer
	maxBody int
	dialing chan struct{} // holds a token while a call dials
	slots   chan struct{} // a token per channel open and in use, up to MaxChannels

	mu        sync.Mutex
	conn      *amqp.Connection
	idle      []*outboxChannel    // confirm channels of conn no call uses
	exchanges map[string]struct{} // exchanges found on conn
	closed    bool

	closing sync.WaitGroup // channels left in doubt, closing in the background
}

var _ outbox.AckPublisher = (*OutboxPublisher)(nil)

// NewOutboxPublisher returns an OutboxPublisher of the broker at url (or
// of OutboxOptions.Dial's); opts may be nil. It connects at the first
// Publish.
func NewOutboxPublisher(url string, opts *OutboxOptions) (*OutboxPublisher, error) {
	var o OutboxOptions
	if opts != nil {
		o = *opts
	}
	if o.Dial == nil && url != "" {
		o.Dial = DialURL(url)
	}
	switch {
	case o.Dial == nil:
		return nil, wrapConfig("url is empty and OutboxOptions.Dial is nil: the publisher cannot connect")
	case o.MaxBodySize < 0:
		return nil, wrapConfig("OutboxOptions.MaxBodySize is %d; it must not be negative", o.MaxBodySize)
	case o.MaxChannels < 0:
		return nil, wrapConfig("OutboxOptions.MaxChannels is %d; it must not be negative", o.MaxChannels)
	}
	return &OutboxPublisher{
		dial:    o.Dial,
		maxBody: cmp.Or(o.MaxBodySize, defaultOutboxMaxBodySize),
		dialing: make(chan struct{}, 1),
		slots:   make(chan struct{}, cmp.Or(o.MaxChannels, defaultOutboxMaxChannels)),
	}, nil
}

// OutboxDestination returns the Destination of an outbox message for
// RabbitMQ: "exchange/key", or key alone for the default exchange (which
// routes it to the queue named key) when key has no slash. exchange must
// not contain a slash.
func OutboxDestination(exchange, key string) string {
	if exchange == "" && !strings.Contains(key, "/") {
		return key
	}
	return exchange + "/" + key
}

// splitOutboxDestination returns the exchange and routing key an outbox
// message's Destination names: the parts before and after its first
// slash ("orders/order.created": exchange "orders", key
// "order.created"), or, without a slash, the default exchange and the
// whole Destination as the key: the queue of that name ("billing"). A
// queue whose name has a slash is addressed with a leading one
// ("/billing/eu").
func splitOutboxDestination(destination string) (exchange, key string) {
	exchange, key, ok := strings.Cut(destination, "/")
	if !ok {
		return "", destination
	}
	return exchange, key
}

// Publish publishes msgs and waits for their confirms (see
// outbox.Publisher and OutboxPublisher).
func (p *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	b, err := p.publish(ctx, msgs, nil)
	if err != nil || b == nil {
		return err
	}
	for _, e := range b.errs {
		if e != nil {
			return &outbox.BatchError{Errs: b.errs}
		}
	}
	return nil
}

// PublishEach publishes msgs as Publish does and reports each message as
// its outcome is known (see outbox.AckPublisher), with the error Publish
// gives it:
//
//   - a message that cannot be published (ErrInvalidMessage, matching
//     outbox.ErrPermanent) at once, before anything is sent, and one to an
//     exchange that does not exist (ErrNoExchange) once the exchanges were
//     checked;
//   - a published message once its confirm arrived and those of the
//     messages published before it in the call did (RabbitMQ confirms a
//     channel's messages mostly in the order published; one confirmed out
//     of order waits for those before it): nil when the broker acked it,
//     ErrNacked when it nacked it, ErrReturned when the broker returned it
//     as unroutable. RabbitMQ sends a message's basic.return before its
//     basic.ack, and every return received before the confirm is taken
//     into account: a returned message is never reported acknowledged.
//
// A message whose confirm will not come is not reported: one published
// or not sent when the channel or the connection closed (a broker
// restart, a forced close, a network cut), and, once ctx ended, one whose
// confirm had not arrived (a message returned by then is reported, with
// ErrReturned). PublishEach then returns an error saying how many were
// not reported, wrapping the first one's error as Publish gives it
// (matching amqp.ErrClosed, or ctx's error). An error before anything was
// published (no connection, an exchange that could not be checked, ctx
// ended) is returned, and no message but those that cannot be published
// is reported. Every report is made on the goroutine that called
// PublishEach, before it returns.
func (p *OutboxPublisher) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(i int, err error)) error {
	c := &eachCall{ack: ack, reported: make([]bool, len(msgs))}
	b, err := p.publish(ctx, msgs, c.report)
	left := c.end()
	switch {
	case err != nil:
		return err
	case left == 0:
		return nil
	}
	var first error
	for i, reported := range c.reported {
		if !reported {
			first = b.errs[i]
			break
		}
	}
	if first == nil {
		first = errors.New("dedupamqp: no outcome") // unreachable: an unreported message has its error
	}
	if cerr := ended(ctx); cerr != nil && !errors.Is(first, cerr) {
		first = fmt.Errorf("%w (%w)", cerr, first)
	}
	return fmt.Errorf("dedupamqp: %d of %d messages not confirmed: %w", left, len(msgs), first)
}

// eachCall passes the reports of one PublishEach on to its ack: each
// message's at most once, and none once PublishEach returned.
type eachCall struct {
	ack func(int, error)

	mu       sync.Mutex
	reported []bool
	over     bool // PublishEach returned: a report goes nowhere
}

func (c *eachCall) report(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || c.reported[i] {
		return
	}
	c.reported[i] = true
	c.ack(i, err)
}

// end stops the reports, and returns how many messages were not reported.
func (c *eachCall) end() (left int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	for _, r := range c.reported {
		if !r {
			left++
		}
	}
	return left
}

// publish is Publish and PublishEach: it publishes msgs, awaits their
// confirms, and returns each message's outcome in the batch's errs, or an
// error of the whole call, before anything was published (b nil: msgs is
// empty or ctx ended before the call). report, when not nil, is called
// for each message whose outcome is known (see outboxBatch.settle) as it
// is known; not for those left in doubt (outboxBatch.fail).
func (p *OutboxPublisher) publish(ctx context.Context, msgs []outbox.Message, report func(int, error)) (*outboxBatch, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &outboxBatch{
		routes: make([]outboxRoute, len(msgs)),
		pubs:   make([]amqp.Publishing, len(msgs)),
		errs:   make([]error, len(msgs)),
		dcs:    make([]*amqp.DeferredConfirmation, len(msgs)),
		report: report,
	}
	valid := false
	for i, m := range msgs {
		var err error
		b.routes[i], b.pubs[i], err = p.prepare(m)
		if err != nil {
			b.settle(i, err)
		}
		valid = valid || err == nil
	}
	if !valid {
		return b, nil
	}
	conn, err := p.connection(ctx)
	if err == nil {
		w := watchConn(ctx, conn)
		err = p.send(ctx, w, conn, b)
		w.end()
	}
	if err != nil {
		if cerr := ended(ctx); cerr != nil {
			return nil, fmt.Errorf("dedupamqp: %w (%v)", cerr, err)
		}
		return nil, err
	}
	return b, nil
}

// ended returns ctx's error, or DeadlineExceeded once its deadline
// passed: a socket deadline set to it (a dial's) may fire first.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// outboxRoute is where a message goes.
type outboxRoute struct{ exchange, key string }

func (r outboxRoute) String() string {
	return fmt.Sprintf("exchange %q, routing key %q", r.exchange, r.key)
}

// outboxBatch is the state of one Publish or PublishEach: per message,
// its route, its publishing, its outcome (nil once confirmed; an error
// for a message that is not to be published, or failed) and its pending
// confirm; and where outcomes are reported as they are known.
type outboxBatch struct {
	routes []outboxRoute
	pubs   []amqp.Publishing
	errs   []error
	dcs    []*amqp.DeferredConfirmation
	report func(i int, err error) // PublishEach's; nil for Publish
}

// settle records message i's outcome, known for sure, and reports it: nil
// once the broker acknowledged it, else why it was not published or the
// broker refused it (invalid, no exchange, nacked, returned).
func (b *outboxBatch) settle(i int, err error) {
	b.errs[i] = err
	if b.report != nil {
		b.report(i, err)
	}
}

// fail records that message i's confirm will not come (the channel
// closed, the context ended, a publish failed): it may have reached the
// broker anyway. It is not reported: PublishEach returns an error for it.
func (b *outboxBatch) fail(i int, err error) {
	b.errs[i] = err
}

// prepare checks m and returns its route and publishing, or why it cannot
// be published.
func (p *OutboxPublisher) prepare(m outbox.Message) (outboxRoute, amqp.Publishing, error) {
	ex, key := splitOutboxDestination(m.Destination)
	r := outboxRoute{ex, key}
	bad := func(format string, args ...any) error {
		return outbox.Permanent(fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...)))
	}
	switch {
	case m.Destination == "" || key == "" && ex == "":
		return r, amqp.Publishing{}, bad("destination %q names no exchange nor routing key", m.Destination)
	case len(ex) > 255 || len(key) > 255:
		return r, amqp.Publishing{}, bad("%v: exchange names and routing keys are at most 255 bytes", r)
	case !utf8.ValidString(ex) || !utf8.ValidString(key):
		return r, amqp.Publishing{}, bad("%v: not UTF-8", r)
	case m.ID == "" || len(m.ID) > 255:
		return r, amqp.Publishing{}, outbox.Permanent(fmt.Errorf("%w: the id is %d bytes; AMQP's MessageId is 1 to 255: %w", ErrInvalidMessage, len(m.ID), dedup.ErrInvalidKey))
	case len(m.Body) > p.maxBody:
		return r, amqp.Publishing{}, bad("the body is %d bytes, over MaxBodySize %d", len(m.Body), p.maxBody)
	}
	pub := amqp.Publishing{MessageId: m.ID, DeliveryMode: amqp.Persistent, Body: m.Body}
	if len(m.Header) > 0 {
		pub.Headers = make(amqp.Table, len(m.Header))
		for k, v := range m.Header {
			if len(k) > 255 {
				return r, amqp.Publishing{}, bad("a header name is %d bytes; AMQP allows 255", len(k))
			}
			pub.Headers[k] = v
		}
	}
	return r, pub, nil
}

// send publishes b's messages on a channel of conn and waits for their
// confirms, filling b.errs. An error is a failure of the whole call: no
// message of it was published.
func (p *OutboxPublisher) send(ctx context.Context, w *connWatch, conn *amqp.Connection, b *outboxBatch) error {
	if err := p.checkExchanges(ctx, w, conn, b); err != nil {
		return err
	}
	pending := false
	for _, e := range b.errs {
		pending = pending || e == nil
	}
	if !pending {
		return nil
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("dedupamqp: waiting for one of the publisher's %d channels: %w", cap(p.slots), ctx.Err())
	}
	defer func() { <-p.slots }()
	oc, err := p.channel(ctx, w, conn)
	if err != nil {
		return err
	}
	returns := drainReturns(oc.returns)
	var broken error // the channel failed: what the rest of the batch gets
	for i := range b.pubs {
		if b.errs[i] != nil {
			continue
		}
		if broken != nil {
			b.fail(i, broken)
			continue
		}
		r := b.routes[i]
		err := w.do(ctx, func() error {
			dc, err := oc.ch.PublishWithDeferredConfirm(r.exchange, r.key, true, false, b.pubs[i])
			b.dcs[i] = dc
			return err
		})
		if err != nil {
			broken = p.unconfirmed(ctx, oc, r, err)
			b.fail(i, broken)
		}
	}
	// From here on the returns are received here, with the confirms.
	rets := &confirmsAndReturns{returns: oc.returns, got: returns.stop()}
	inDoubt := broken != nil
	// The confirms are taken in the order published: each one in, and
	// those in right after it, are settled at once.
	next := 0
	for ctx.Err() == nil {
		for next < len(b.dcs) && b.dcs[next] == nil {
			next++
		}
		if next == len(b.dcs) {
			break
		}
		if !rets.await(ctx, b.dcs[next]) {
			continue
		}
		end := next + 1
		for end < len(b.dcs) && (b.dcs[end] == nil || isDone(b.dcs[end])) {
			end++
		}
		// RabbitMQ sends a message's basic.return before its basic.ack,
		// and amqp091 hands it over before it reads the ack: once a
		// confirm is in, the return of its message (if any) is among
		// those received or waiting.
		rets.take()
		for i := next; i < end; i++ {
			if b.dcs[i] != nil {
				inDoubt = p.confirmed(ctx, oc, b, i, rets) || inDoubt
			}
		}
		next = end
	}
	// What is left when the context ended: the confirms in are settled,
	// the others failed (unless their message was returned).
	done := make([]bool, len(b.dcs))
	for i := next; i < len(b.dcs); i++ {
		done[i] = b.dcs[i] != nil && isDone(b.dcs[i])
	}
	rets.take()
	for i := next; i < len(b.dcs); i++ {
		switch {
		case b.dcs[i] == nil:
		case done[i]:
			inDoubt = p.confirmed(ctx, oc, b, i, rets) || inDoubt
		default:
			inDoubt = true
			if ret, ok := rets.of(b, i); ok {
				b.settle(i, returnedError(b.routes[i], ret))
				continue
			}
			b.fail(i, fmt.Errorf("dedupamqp: %v: no confirm before the context ended: %w", b.routes[i], ctx.Err()))
		}
	}
	p.release(oc, inDoubt)
	return nil
}

// confirmed settles message i, whose confirm is in, with the returns
// received up to it: returned, acknowledged or nacked; or fails it when
// the channel closed (amqp091 nacks the confirms it still awaited). It
// reports whether the channel is in doubt.
func (p *OutboxPublisher) confirmed(ctx context.Context, oc *outboxChannel, b *outboxBatch, i int, rets *confirmsAndReturns) (inDoubt bool) {
	if ret, ok := rets.of(b, i); ok {
		b.settle(i, returnedError(b.routes[i], ret))
		return oc.ch.IsClosed()
	}
	switch {
	case b.dcs[i].Acked():
		b.settle(i, nil)
	case oc.ch.IsClosed():
		b.fail(i, p.unconfirmed(ctx, oc, b.routes[i], nil))
		return true
	default:
		b.settle(i, fmt.Errorf("dedupamqp: %v: %w", b.routes[i], ErrNacked))
	}
	return false
}

func returnedError(r outboxRoute, ret amqp.Return) error {
	return fmt.Errorf("dedupamqp: %v: %d %s: %w", r, ret.ReplyCode, ret.ReplyText, ErrReturned)
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// confirmsAndReturns receives a channel's returns while a call awaits
// its confirms, and keeps those not attributed yet.
type confirmsAndReturns struct {
	returns <-chan amqp.Return // nil once closed
	got     []amqp.Return
}

// await waits for dc's confirm (true), receiving the returns meanwhile,
// until ctx ends (false). It may return false before: call it again.
func (c *confirmsAndReturns) await(ctx context.Context, dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	case r, ok := <-c.returns:
		if ok {
			c.got = append(c.got, r)
		} else {
			c.returns = nil // closed with the channel
		}
	case <-ctx.Done():
	}
	return false
}

// take receives the returns waiting.
func (c *confirmsAndReturns) take() {
	for c.returns != nil {
		select {
		case r, ok := <-c.returns:
			if !ok {
				c.returns = nil
				return
			}
			c.got = append(c.got, r)
		default:
			return
		}
	}
}

// of takes the return of message i of b, if one was received: the first
// with its MessageId, exchange and routing key (the messages are settled
// in the order published, which is the order of their returns).
func (c *confirmsAndReturns) of(b *outboxBatch, i int) (amqp.Return, bool) {
	for j, ret := range c.got {
		if b.pubs[i].MessageId == ret.MessageId && b.routes[i] == (outboxRoute{ret.Exchange, ret.RoutingKey}) {
			c.got = slices.Delete(c.got, j, j+1)
			return ret, true
		}
	}
	return amqp.Return{}, false
}

// unconfirmed is the error of a message whose confirm will not come:
// the channel closed (cause, when given, is the publish's own error), or
// the context ended and the connection was closed to stop the call.
func (p *OutboxPublisher) unconfirmed(ctx context.Context, oc *outboxChannel, r outboxRoute, cause error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedupamqp: %v: not confirmed before the context ended: %w", r, err)
	}
	reason := oc.closeReason(ctx)
	if reason != nil && reason.Code == amqp.NotFound {
		// An exchange deleted since it was checked: check them again.
		p.forgetExchanges(oc.conn)
	}
	switch {
	case reason != nil:
		return fmt.Errorf("dedupamqp: %v: the channel closed before the broker confirmed the message: %w: %w", r, reason, amqp.ErrClosed)
	case cause != nil && !errors.Is(cause, amqp.ErrClosed):
		return fmt.Errorf("dedupamqp: %v: publish: %w: %w", r, cause, amqp.ErrClosed)
	}
	return fmt.Errorf("dedupamqp: %v: the channel closed before the broker confirmed the message: %w", r, amqp.ErrClosed)
}

// connection returns the open connection, dialing one when there is none.
func (p *OutboxPublisher) connection(ctx context.Context) (*amqp.Connection, error) {
	if conn, err := p.current(); conn != nil || err != nil {
		return conn, err
	}
	select {
	case p.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.dialing }()
	// Another call may have dialed while this one waited.
	if conn, err := p.current(); conn != nil || err != nil {
		return conn, err
	}
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dedupamqp: connect: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = conn.Close()
		return nil, ErrPublisherClosed
	}
	p.conn, p.idle, p.exchanges = conn, nil, map[string]struct{}{}
	return conn, nil
}

// current returns the connection when it is open, nil when there is none
// (none yet, or lost), or ErrPublisherClosed.
func (p *OutboxPublisher) current() (*amqp.Connection, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, ErrPublisherClosed
	case p.conn != nil && !p.conn.IsClosed():
		return p.conn, nil
	}
	return nil, nil
}

// checkExchanges fails the messages whose exchange does not exist, with
// ErrNoExchange, checking (with a passive declare, on a channel of its
// own, which the broker closes when the exchange is missing) the
// exchanges conn has not found yet. It returns an error when it could not
// check.
func (p *OutboxPublisher) checkExchanges(ctx context.Context, w *connWatch, conn *amqp.Connection, b *outboxBatch) error {
	var unknown []string
	p.mu.Lock()
	for i, r := range b.routes {
		if b.errs[i] != nil || r.exchange == "" {
			continue
		}
		if _, ok := p.exchanges[r.exchange]; (!ok || p.conn != conn) && !slices.Contains(unknown, r.exchange) {
			unknown = append(unknown, r.exchange)
		}
	}
	p.mu.Unlock()
	if len(unknown) == 0 {
		return nil
	}
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			p.closeInBackground(ch)
		}
	}()
	missing := map[string]error{}
	for _, ex := range unknown {
		if ch == nil {
			if err := w.do(ctx, func() (err error) { ch, err = conn.Channel(); return err }); err != nil {
				return fmt.Errorf("dedupamqp: open a channel to check exchange %q: %w", ex, err)
			}
		}
		err := w.do(ctx, func() error {
			return ch.ExchangeDeclarePassive(ex, amqp.ExchangeDirect, false, false, false, false, nil)
		})
		var ae *amqp.Error
		switch {
		case err == nil:
			p.mu.Lock()
			if p.conn == conn {
				p.exchanges[ex] = struct{}{}
			}
			p.mu.Unlock()
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			missing[ex] = err
			ch = nil // the broker closed it
		default:
			return fmt.Errorf("dedupamqp: check exchange %q: %w", ex, err)
		}
	}
	for i, r := range b.routes {
		if err, ok := missing[r.exchange]; ok && b.errs[i] == nil {
			b.settle(i, fmt.Errorf("dedupamqp: %v: %w: %w", r, ErrNoExchange, err))
		}
	}
	return nil
}

// forgetExchanges makes the next calls check conn's exchanges again.
func (p *OutboxPublisher) forgetExchanges(conn *amqp.Connection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == conn {
		p.exchanges = map[string]struct{}{}
	}
}

// outboxChannel is a channel in confirm mode, with its returns and the
// reason it closed.
type outboxChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	reason  *amqp.Error // received from closes
}

// closeReason is why the channel closed: nil when it is open or was
// closed by this side. A closed channel's reason is on its way (amqp091
// marks the channel closed, then sends it), so it is awaited, within ctx.
func (oc *outboxChannel) closeReason(ctx context.Context) *amqp.Error {
	if oc.reason != nil || !oc.ch.IsClosed() {
		return oc.reason
	}
	select {
	case e, ok := <-oc.closes:
		if ok {
			oc.reason = e
		}
	case <-ctx.Done():
	}
	return oc.reason
}

// channel returns an idle channel of conn, or opens one.
func (p *OutboxPublisher) channel(ctx context.Context, w *connWatch, conn *amqp.Connection) (*outboxChannel, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		oc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if oc.conn == conn && !oc.ch.IsClosed() {
			p.mu.Unlock()
			return oc, nil
		}
	}
	p.mu.Unlock()
	oc := &outboxChannel{conn: conn}
	err := w.do(ctx, func() (err error) {
		if oc.ch, err = conn.Channel(); err != nil {
			return err
		}
		if err = oc.ch.Confirm(false); err != nil {
			_ = oc.ch.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dedupamqp: open a publishing channel: %w", err)
	}
	// The returns are drained while a call publishes; amqp091 gives up
	// on a return that waits for room for 5s, so there is room for many.
	oc.returns = oc.ch.NotifyReturn(make(chan amqp.Return, 64))
	oc.closes = oc.ch.NotifyClose(make(chan *amqp.Error, 1))
	return oc, nil
}

// release gives oc back for other calls, or, when its state is in doubt
// (confirms outstanding, a failed publish), closes it: in the background,
// as the close waits for the broker, which may not answer.
func (p *OutboxPublisher) release(oc *outboxChannel, inDoubt bool) {
	if !inDoubt && !oc.ch.IsClosed() {
		p.mu.Lock()
		if !p.closed && p.conn == oc.conn {
			p.idle = append(p.idle, oc)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	if !oc.ch.IsClosed() {
		p.closeInBackground(oc.ch)
	}
}

// closeInBackground closes ch without waiting for the broker's answer,
// which may not come. Once the publisher is closed, its connection's
// close closes ch.
func (p *OutboxPublisher) closeInBackground(ch *amqp.Channel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closing.Go(func() { _ = ch.Close() })
	}
}

// Close closes the publisher's connection (within ctx's deadline, else
// 10s), which closes its channels. Calls in flight fail; later ones fail
// with ErrPublisherClosed.
func (p *OutboxPublisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conn := p.conn
	p.conn, p.idle = nil, nil
	p.mu.Unlock()
	var err error
	if conn != nil {
		deadline := time.Now().Add(outboxCloseTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		if err = conn.CloseDeadline(deadline); errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	// With the connection closed, the channels closing in the background
	// are closed too.
	p.closing.Wait()
	if err != nil {
		return fmt.Errorf("dedupamqp: close the outbox publisher's connection: %w", err)
	}
	return nil
}

// connWatch bounds a call by its context where amqp091 cannot: a socket
// write that blocks (the broker stopped reading) and an RPC whose answer
// does not come. When the context ends while the call is in one of them,
// the connection is closed with an immediate deadline, which fails the
// write or the RPC.
type connWatch struct {
	blocked atomic.Bool
	stop    func() bool
	fired   chan struct{}
}

func watchConn(ctx context.Context, conn *amqp.Connection) *connWatch {
	w := &connWatch{fired: make(chan struct{})}
	w.stop = context.AfterFunc(ctx, func() {
		defer close(w.fired)
		if w.blocked.Load() {
			_ = conn.CloseDeadline(time.Now())
		}
	})
	return w
}

// do runs op, which may block on the broker, unless ctx already ended.
func (w *connWatch) do(ctx context.Context, op func() error) error {
	w.blocked.Store(true)
	defer w.blocked.Store(false)
	// After the Store: a context that ends from here on finds the call
	// blocked, and one that ended before is seen here.
	if err := ctx.Err(); err != nil {
		return err
	}
	return op()
}

// end stops watching, and waits for a close the watch started.
func (w *connWatch) end() {
	if !w.stop() {
		<-w.fired
	}
}

// returnsDrain receives a channel's returns while a call publishes, so
// that amqp091 never waits on them.
type returnsDrain struct {
	stopc chan struct{}
	got   chan []amqp.Return
}

func drainReturns(returns <-chan amqp.Return) *returnsDrain {
	d := &returnsDrain{stopc: make(chan struct{}), got: make(chan []amqp.Return, 1)}
	go func() {
		var got []amqp.Return
		for {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil // closed with the channel
					continue
				}
				got = append(got, r)
			case <-d.stopc:
				for {
					select {
					case r, ok := <-returns:
						if ok {
							got = append(got, r)
							continue
						}
					default:
					}
					d.got <- got
					return
				}
			}
		}
	}()
	return d
}

// stop returns the returns received so far, and those waiting.
func (d *returnsDrain) stop() []amqp.Return {
	close(d.stopc)
	return <-d.got
}
