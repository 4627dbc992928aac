package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// gates hold the handling of chosen events until released: how the
// scenario plays a handler slower than the sender's patience.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	started chan struct{} // closed when a handler reached the gate
	release chan struct{}
	once    sync.Once // closes started
	opened  sync.Once // closes release
}

// open lets the held handlers go on.
func (gt *gate) open() { gt.opened.Do(func() { close(gt.release) }) }

// add puts a gate before the effect of event.
func (g *gates) add(event string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*gate{}
	}
	gt := &gate{started: make(chan struct{}), release: make(chan struct{})}
	g.m[event] = gt
	return gt
}

// hold is the receiver's hook: it waits at event's gate, if any, until the
// gate is released or ctx ends.
func (g *gates) hold(ctx context.Context, event string) {
	g.mu.Lock()
	gt := g.m[event]
	g.mu.Unlock()
	if gt == nil {
		return
	}
	gt.once.Do(func() { close(gt.started) })
	select {
	case <-gt.release:
	case <-ctx.Done():
	}
}

// releaseAll releases every gate: the scenario's end, whatever happened.
func (g *gates) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gt := range g.m {
		gt.open()
	}
}

// event is one webhook event of the scenario.
type event struct {
	sender *sender
	id     string
	body   string
}

// outcome is what the scenario saw.
type outcome struct {
	// events in the order played; tries, every attempt at each, in order
	// for the sequential steps.
	events []event
	tries  map[string][]attempt
	// slow are the events whose first delivery the sender gave up on
	// while the handler ran.
	slow []string
	// refused are the bad deliveries: what each was, and its answer.
	refused []refusal
	// effects counts the effects of each event at the end.
	effects map[string]int
}

type refusal struct {
	what string
	got  attempt
}

// play delivers each event of both senders several times over the
// replicas: four deliveries at once (as a sender that sent a duplicate
// and retried while the first ran), each until a 2xx, then two
// redeliveries; one event of each sender is first delivered by a sender
// that gives up while the handler runs, and retried at once (in flight)
// and after the handler finished. Then bad deliveries: a forged one, one
// without its id, one with an id over 255 bytes. It writes a report to
// out.
func play(ctx context.Context, replicas []string, billing, github *sender, g *gates, l *ledger, out io.Writer) (*outcome, error) {
	o := &outcome{tries: map[string][]attempt{}}
	for i := 1; i <= 3; i++ {
		o.events = append(o.events,
			event{billing, "msg_" + randomHex(12), fmt.Sprintf(`{"type":"invoice.paid","timestamp":"2026-11-22T12:00:0%dZ","data":{"invoice":"in_%d","account":"acct_%d","cents":%d}}`, i, i, i, 1000*i)},
			event{github, uuid(), fmt.Sprintf(`{"action":"opened","issue":{"url":"https://api.github.com/repos/octocat/Hello-World/issues/%d","number":%d},"repository":{"id":1296269,"full_name":"octocat/Hello-World"},"sender":{"login":"octocat","id":1}}`, 1346+i, 1346+i)},
		)
	}
	var mu sync.Mutex
	for _, ev := range o.events {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range 4 {
			wg.Go(func() {
				tries, err := ev.sender.deliver(ctx, replicas, i, ev.id, ev.body)
				mu.Lock()
				o.tries[ev.id] = append(o.tries[ev.id], tries...)
				mu.Unlock()
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return o, err
		}
		for i := range 2 {
			tries, err := ev.sender.deliver(ctx, replicas, i, ev.id, ev.body)
			o.tries[ev.id] = append(o.tries[ev.id], tries...)
			if err != nil {
				return o, err
			}
		}
		fmt.Fprintf(out, "%-7s %s: %s; effects %d\n", ev.sender.name, ev.id, summary(o.tries[ev.id]), l.count(ev.id))
	}

	for _, s := range []*sender{billing, github} {
		ev := event{s, "msg_" + randomHex(12), `{"type":"invoice.paid","data":{"invoice":"in_9","account":"acct_9","cents":990}}`}
		if s == github {
			ev = event{s, uuid(), `{"action":"opened","issue":{"number":1400},"repository":{"full_name":"octocat/Hello-World"}}`}
		}
		o.events, o.slow = append(o.events, ev), append(o.slow, ev.id)
		tries, err := slowHandler(ctx, replicas, ev, g.add(ev.id))
		o.tries[ev.id] = tries
		if err != nil {
			return o, err
		}
		fmt.Fprintf(out, "%-7s %s (the sender gave up at first): %s; effects %d\n", s.name, ev.id, strings.Join(strs(tries), ", "), l.count(ev.id))
	}

	forged := func(r *http.Request, id, body string) {
		standardSender(nil, "whsec_c2VjcmV0LW9mLXNvbWVvbmUtZWxzZQ==", time.Now).sign(r, id, body)
	}
	for _, b := range []struct {
		what string
		s    *sender
		id   string
		sign func(*http.Request, string, string)
	}{
		{"a forged billing delivery (another secret)", billing, o.events[0].id, forged},
		{"a billing delivery without its webhook-id", billing, "", func(r *http.Request, _, body string) {
			billing.sign(r, "", body)
			r.Header.Del("webhook-id")
		}},
		{"a GitHub delivery with a 300-byte id", github, strings.Repeat("f", 300), nil},
	} {
		a := b.s.try(ctx, replicas[0], b.id, o.events[0].body, b.sign)
		o.refused = append(o.refused, refusal{b.what, a})
		fmt.Fprintf(out, "%s: %s %s\n", b.what, a, a.Body)
	}

	once := true
	o.effects = map[string]int{}
	for _, id := range l.events() {
		o.effects[id] = l.count(id)
	}
	for _, ev := range o.events {
		once = once && o.effects[ev.id] == 1
	}
	once = once && len(o.effects) == len(o.events)
	fmt.Fprintf(out, "Every event had its effect once: %v (%d events, %d deliveries)\n", once, len(o.events), o.deliveries())
	return o, nil
}

// slowHandler plays a sender whose first delivery of ev times out while
// the handler runs: it gives up once the handler has begun, retries at
// once (the event is in flight: 503), and retries again after the
// handler finished, until a 2xx.
func slowHandler(ctx context.Context, replicas []string, ev event, gt *gate) ([]attempt, error) {
	patience, giveUp := context.WithCancel(ctx)
	defer giveUp()
	first := make(chan attempt, 1)
	go func() { first <- ev.sender.try(patience, replicas[0], ev.id, ev.body, nil) }()
	select {
	case <-gt.started:
	case a := <-first:
		return []attempt{a}, fmt.Errorf("%s: the first delivery of %s was answered before its handler held: %s %s", ev.sender.name, ev.id, a, a.Body)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	giveUp() // the sender's timeout
	tries := []attempt{<-first}
	tries = append(tries, ev.sender.try(ctx, replicas[1%len(replicas)], ev.id, ev.body, nil))
	gt.open()
	more, err := ev.sender.deliver(ctx, replicas, 0, ev.id, ev.body)
	return append(tries, more...), err
}

// deliveries counts the attempts made.
func (o *outcome) deliveries() int {
	n := len(o.refused)
	for _, t := range o.tries {
		n += len(t)
	}
	return n
}

// summary counts the answers of tries: "200 x1, 200 (replayed) x5, 503
// x2".
func summary(tries []attempt) string {
	counts := map[string]int{}
	for _, a := range tries {
		counts[a.String()]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

func strs(tries []attempt) []string {
	s := make([]string, len(tries))
	for i, a := range tries {
		s[i] = a.String()
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// uuid returns a random version 4 UUID, as GitHub's delivery GUIDs look.
func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
