package pgoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
)

// Relay publishes an outbox's committed messages through an
// outbox.Publisher and marks them sent once the broker acknowledged them.
// Several relays (in one process or many) share the work: each holds the
// leases of a share of the buckets of ordering keys and publishes only
// their messages (see the package documentation). Start it, and Stop it
// at shutdown; it cannot start again.
type Relay struct {
	o      *Outbox
	pub    outbox.Publisher
	ackPub outbox.AckPublisher // pub, when it reports each message's acknowledgement
	cfg    relayConfig
	id     pgtype.UUID
	hex    string // id, for events and logs

	mu        sync.Mutex
	started   bool
	stopping  bool
	quit      chan struct{} // closed by Stop: finish the calls in flight, give the leases back
	quitOnce  sync.Once
	cancel    context.CancelFunc
	stopWatch func() bool
	stopped   chan struct{}
	err       error

	held  atomic.Pointer[[]bool] // the buckets held, read by the listener
	wake  chan struct{}
	stats counters
}

// NewRelay returns a relay of o's messages that publishes through pub;
// opts may be nil. When pub is an outbox.AckPublisher, the relay calls
// its PublishEach, and sends a key's next message as soon as the
// previous one's own acknowledgement is reported.
func NewRelay(o *Outbox, pub outbox.Publisher, opts *RelayOptions) (*Relay, error) {
	if o == nil {
		return nil, fmt.Errorf("pgoutbox: %w: the outbox is nil", store.ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("pgoutbox: %w: the publisher is nil", store.ErrInvalidConfig)
	}
	cfg, err := opts.config(o.cfg.logger)
	if err != nil {
		return nil, err
	}
	r := &Relay{o: o, pub: pub, cfg: cfg, quit: make(chan struct{}), stopped: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.ackPub, _ = pub.(outbox.AckPublisher)
	if _, err := rand.Read(r.id.Bytes[:]); err != nil {
		return nil, err
	}
	r.id.Bytes[6] = r.id.Bytes[6]&0x0f | 0x40 // a version 4 UUID
	r.id.Bytes[8] = r.id.Bytes[8]&0x3f | 0x80
	r.id.Valid = true
	r.hex = hex.EncodeToString(r.id.Bytes[:])
	empty := make([]bool, o.cfg.buckets)
	r.held.Store(&empty)
	return r, nil
}

// ID returns the relay's id: the owner of its leases in the table, and
// Event.Relay.
func (r *Relay) ID() string { return r.hex }

// Start starts the relay: it joins the others, takes its share of the
// buckets, listens for new messages and publishes them, in goroutines of
// its own that Stop ends. A relay starts once (ErrStarted).
//
// ctx is the relay's lifetime. Its end before Stop is a hard stop nobody
// asked for: the calls in flight are abandoned, logged at error level and
// reported by Err (ErrStoppedUnasked). Shut down with Stop, on a context
// of its own.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return ErrStarted
	}
	r.started = true
	work, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	watched := make(chan struct{}) // closed once the watch below ran
	r.stopWatch = context.AfterFunc(work, func() {
		defer close(watched)
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.stopping && ctx.Err() != nil {
			r.err = fmt.Errorf("%w: Start's context ended: %w", ErrStoppedUnasked, context.Cause(ctx))
			r.cfg.logger.ErrorContext(ctx, "pgoutbox: relay stopped without Stop", slog.String("relay", r.hex), slog.Any("error", r.err))
		}
		r.stopping = true
	})
	listenCtx, stopListening := context.WithCancel(work)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(listenCtx) })
	wg.Go(func() {
		defer stopListening()
		r.run(work)
	})
	go func() { // owned by the two above: ends when they do
		wg.Wait()
		if !r.stopWatch() {
			// The watch started (work ended): Err must hold what it
			// records before Stopped is closed.
			<-watched
		}
		cancel()
		close(r.stopped)
	}()
	return nil
}

// Stop lets the calls in flight finish (their acknowledged messages marked
// sent), gives the relay's buckets back so that the other relays take
// them at once, and returns when the relay's goroutines are gone. When
// ctx ends first, they are abandoned (what was published but not marked
// is published again later, with the same ids) and Stop returns
// ctx's error; Stopped tells when the goroutines are gone.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return ErrNotStarted
	}
	r.stopping = true
	r.quitOnce.Do(func() { close(r.quit) })
	r.mu.Unlock()
	select {
	case <-r.stopped:
		return nil
	case <-ctx.Done():
		r.cancel()
		return ctx.Err()
	}
}

// Stopped is closed when the relay has stopped: after Stop, or after
// Start's context ended (Err then says so).
func (r *Relay) Stopped() <-chan struct{} { return r.stopped }

// Err returns why the relay stopped when nobody asked it to (an error
// matching ErrStoppedUnasked), nil otherwise.
func (r *Relay) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// RelayStats is what a relay did so far.
type RelayStats struct {
	// Published counts messages the broker acknowledged that the relay
	// marked sent (a copy published again after a crash or a lost lease
	// counts again).
	Published uint64
	// Failed counts messages a pump read but did not get acknowledged
	// (refused, unanswered, or held back behind an earlier message of
	// their key that was), once per pump.
	Failed uint64
	// Rounds counts the marks of published messages (each fetch marks
	// what was acknowledged since the previous one).
	Rounds uint64
	// Buckets is how many buckets the relay holds now.
	Buckets int
	// Cleaned counts sent messages deleted past the retention (their
	// ids: the messages themselves are deleted when marked sent).
	Cleaned uint64
	// Dead counts messages the broker refused for good (an error
	// matching outbox.ErrPermanent), set aside in the dead table.
	Dead uint64
}

type counters struct {
	published, failed, rounds, cleaned, dead atomic.Uint64
	buckets                                  atomic.Int64
}

// Stats returns what the relay did so far.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Published: r.stats.published.Load(),
		Failed:    r.stats.failed.Load(),
		Rounds:    r.stats.rounds.Load(),
		Buckets:   int(r.stats.buckets.Load()),
		Cleaned:   r.stats.cleaned.Load(),
		Dead:      r.stats.dead.Load(),
	}
}

// observe hands e to the Observer, recovering its panics.
func (r *Relay) observe(ctx context.Context, e outbox.Event) {
	if r.cfg.observer == nil {
		return
	}
	e.Relay = r.hex
	defer func() {
		if p := recover(); p != nil {
			r.cfg.logger.ErrorContext(ctx, "pgoutbox: the observer panicked", slog.Any("panic", p))
		}
	}()
	r.cfg.observer.Observe(ctx, e)
}

// wakeUp makes the run loop look for messages now.
func (r *Relay) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// bounded returns ctx bounded by the outbox's statement timeout.
func (r *Relay) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.o.cfg.timeout)
}
