package deduphttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// eventLog counts a webhook handler's runs per event id.
type eventLog struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *eventLog) add(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string]int{}
	}
	l.runs[id]++
	return l.runs[id]
}

func (l *eventLog) get(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[id]
}

// webhookHandler reads the event id with src, counts the run and answers
// 200 {"event":...,"run":n}, or what answer says for that run (a status;
// -1 panics). hold, when set, is waited on (or the request's context)
// before answering.
func webhookHandler(l *eventLog, src deduphttp.KeySource, answer func(run int) int, hold <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, err := src(r, body)
		if err != nil {
			http.Error(w, "the handler could not read the id: "+err.Error(), http.StatusInternalServerError)
			return
		}
		n := l.add(id)
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				http.Error(w, "cancelled", http.StatusServiceUnavailable)
				return
			}
		}
		status := http.StatusOK
		if answer != nil {
			status = answer(n)
		}
		if status == -1 {
			panic("handler bug")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"event":%q,"run":%d,"status":%d}`, id, n, status)
	})
}

// newWebhook returns a webhook middleware on s for sender with source src,
// in the namespace "orders" (see records).
func newWebhook(t testing.TB, s store.Store, src deduphttp.KeySource, opts *deduphttp.WebhookOptions) *deduphttp.Middleware {
	t.Helper()
	if opts == nil {
		opts = &deduphttp.WebhookOptions{}
	}
	opts.Source = src
	if opts.Sender == "" && opts.Principal == nil {
		opts.Sender = "sender"
	}
	if opts.Config == nil {
		opts.Config = &dedup.Config{}
	}
	opts.Config.Namespace = "orders"
	m, err := deduphttp.NewWebhook(s, opts)
	require.NoError(t, err)
	return m
}

// serveRecorded serves r through h and returns the answer.
func serveRecorded(h http.Handler, r *http.Request) reply {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return reply{Status: w.Code, Header: w.Result().Header, Body: w.Body.Bytes()}
}

// TestWebhookDuplicateGetsTheFirstResponse: for each sender, the first
// delivery of an event runs the handler and every redelivery of it gets
// the first 2xx response back (Idempotency-Replayed: true), so the sender
// stops: Standard Webhooks re-signs each attempt with a new timestamp,
// Stripe may render the event anew (pending_webhooks changes as other
// endpoints acknowledge it), and the id alone decides. Another event runs.
func TestWebhookDuplicateGetsTheFirstResponse(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		for name, tc := range map[string]struct {
			src          deduphttp.KeySource
			first, retry *http.Request
			other        *http.Request
			id           string
		}{
			"Standard Webhooks": {
				src:   deduphttp.StandardWebhookID(),
				first: standardWebhook(swID, swTimestamp, swSignature, swPayload),
				retry: standardWebhook(swID, "1614265335", signStandard(swSecret, swID, "1614265335", swPayload), swPayload),
				other: standardWebhook(swContactID, swTimestamp, signStandard(swSecret, swContactID, swTimestamp, swContactPayload), swContactPayload),
				id:    swID,
			},
			"GitHub": {
				src:   deduphttp.GitHubDelivery(),
				first: gitHubDelivery(ghDelivery, ghHookID, "issues", ghIssuesOpened, ghSecret),
				retry: gitHubDelivery(ghDelivery, ghHookID, "issues", ghIssuesOpened, ghSecret), // a redelivery keeps the GUID
				other: gitHubDelivery("0b989ba4-242f-11e5-81e1-c7b6b7f4c0d3", ghHookID, "ping", `{"zen":"Design for failure."}`, ghSecret),
				id:    ghDelivery,
			},
			"Stripe": {
				src:   deduphttp.StripeEventID(),
				first: stripeDelivery(stripeEvent),
				retry: stripeDelivery(strings.Replace(stripeEvent, `"pending_webhooks": 0`, `"pending_webhooks": 1`, 1)),
				other: stripeDelivery(strings.Replace(stripeEvent, stripeEventID, "evt_1NG8Du2eZvKYlo2CtkT9zZtn", 1)),
				id:    stripeEventID,
			},
		} {
			var log eventLog
			h := newWebhook(t, s, tc.src, &deduphttp.WebhookOptions{Sender: name}).Wrap(webhookHandler(&log, tc.src, nil, nil))
			first := serveRecorded(h, tc.first)
			require.Equal(t, http.StatusOK, first.Status, "%s: %s", name, first.Body)
			require.False(t, first.replayed(), name)
			retry := serveRecorded(h, tc.retry)
			require.True(t, retry.replayed(), "%s: %s", name, retry.Body)
			equalReplay(t, first, retry)
			require.Equal(t, 1, log.get(tc.id), name)

			other := serveRecorded(h, tc.other)
			require.Equal(t, http.StatusOK, other.Status, name)
			require.False(t, other.replayed(), name)
		}
		require.Equal(t, 6, records(t, s), "two events of each sender")
	})
}

// TestWebhookScopeIsTheSender: an event id is scoped by the sender (a fixed
// name per endpoint, or Principal), never by the end user an event is
// about: one sender's event delivered twice runs once whatever its body
// says of the user, and two senders (two endpoints, two GitHub hooks) with
// the same id each run once.
func TestWebhookScopeIsTheSender(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	var stripeLog, svixLog, hookLog eventLog
	src := deduphttp.KeyFromJSON("id")
	stripe := newWebhook(t, s, src, &deduphttp.WebhookOptions{Sender: "stripe"}).Wrap(webhookHandler(&stripeLog, src, nil, nil))
	svix := newWebhook(t, s, src, &deduphttp.WebhookOptions{Sender: "svix"}).Wrap(webhookHandler(&svixLog, src, nil, nil))
	for _, customer := range []string{"cus_A", "cus_B", "cus_A"} {
		body := `{"id":"evt_1","object":"event","data":{"object":{"customer":"` + customer + `"}}}`
		serveRecorded(stripe, stripeDelivery(body))
		serveRecorded(svix, stripeDelivery(body))
	}
	require.Equal(t, 1, stripeLog.get("evt_1"), "one sender, one event: the end user is not in the scope")
	require.Equal(t, 1, svixLog.get("evt_1"), "another sender's id is another event")

	// Two hooks (or Apps) that receive one event can get the same GUID: a
	// Principal per hook keeps them apart.
	gh := newWebhook(t, s, deduphttp.GitHubDelivery(), &deduphttp.WebhookOptions{
		Principal: func(r *http.Request) string { return "github-hook-" + r.Header.Get("X-GitHub-Hook-ID") },
	}).Wrap(webhookHandler(&hookLog, deduphttp.GitHubDelivery(), nil, nil))
	for _, hook := range []string{ghHookID, "292430183", ghHookID} {
		r := serveRecorded(gh, gitHubDelivery(ghDelivery, hook, "issues", ghIssuesOpened, ghSecret))
		require.Equal(t, http.StatusOK, r.Status)
	}
	require.Equal(t, 2, hookLog.get(ghDelivery), "two hooks, the event once each")
}

// TestWebhookInFlight: a delivery of an event that another delivery is
// handling gets 503 request-in-flight with a Retry-After, which every
// sender retries; once the first completes, the retry gets its response.
func TestWebhookInFlight(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var log eventLog
		hold := make(chan struct{})
		var release sync.Once
		src := deduphttp.StandardWebhookID()
		srv := serve(t, newWebhook(t, s, src, nil).Wrap(webhookHandler(&log, src, nil, hold)))
		t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the server closes, should the test fail
		c := client(t)
		deliver := func() (reply, error) {
			r := standardWebhook(swID, swTimestamp, swSignature, swPayload)
			hr, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/svix", strings.NewReader(swPayload))
			if err != nil {
				return reply{}, err
			}
			hr.Header = r.Header
			return send(c, hr)
		}
		firstReply := make(chan reply, 1)
		go func() {
			r, err := deliver()
			if err != nil {
				r = reply{Status: -1, Body: []byte(err.Error())}
			}
			firstReply <- r
		}()
		require.Eventually(t, func() bool { return log.get(swID) == 1 }, testenv.WaitTimeout, time.Millisecond)

		busy, err := deliver()
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, busy.Status, "%s", busy.Body)
		require.Equal(t, deduphttp.CodeInFlight, busy.problem(t).Code)
		retryAfter, err := strconv.Atoi(busy.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, retryAfter, 1)
		require.LessOrEqual(t, retryAfter, int((30*time.Second)/time.Second))

		release.Do(func() { close(hold) })
		first := testenv.Recv(t, firstReply, "the first delivery's answer")
		require.Equal(t, http.StatusOK, first.Status, "%s", first.Body)
		again, err := deliver()
		require.NoError(t, err)
		require.True(t, again.replayed())
		equalReplay(t, first, again)
		require.Equal(t, 1, log.get(swID))
	})
}

// TestWebhookConcurrentDeliveries: 40 deliveries of one event at once run
// the handler once; one answer is the original, every other a 503 or the
// replay of it.
func TestWebhookConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var log eventLog
		src := deduphttp.GitHubDelivery()
		srv := serve(t, newWebhook(t, s, src, nil).Wrap(webhookHandler(&log, src, nil, nil)))
		c := client(t)
		const n = 40
		replies := make([]reply, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := gitHubDelivery(ghDelivery, ghHookID, "issues", ghIssuesOpened, ghSecret)
				hr, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/github", strings.NewReader(ghIssuesOpened))
				if err == nil {
					hr.Header = r.Header
					replies[i], err = send(c, hr)
				}
				if err != nil {
					replies[i] = reply{Status: -1, Body: []byte(err.Error())}
				}
			})
		}
		wg.Wait()
		var originals []reply
		for _, r := range replies {
			switch {
			case r.Status == http.StatusServiceUnavailable:
				require.Equal(t, deduphttp.CodeInFlight, r.problem(t).Code)
			case r.Status == http.StatusOK && !r.replayed():
				originals = append(originals, r)
			default:
				require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			}
		}
		require.Len(t, originals, 1)
		for _, r := range replies {
			if r.replayed() {
				equalReplay(t, originals[0], r)
			}
		}
		require.Equal(t, 1, log.get(ghDelivery))
	})
}

// TestWebhookFailureReleasesTheEvent: any answer but a 2xx (a 5xx, a 4xx,
// a 429, a panic) releases the event, since the sender takes it for a
// failed delivery and retries: the retry runs the handler again, past the
// receiver's default MaxAttempts (the sender's schedule bounds the
// attempts), until a 2xx completes it.
func TestWebhookFailureReleasesTheEvent(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var log eventLog
		answers := []int{500, 404, 429, -1, 503, 400, 422, 302, 200}
		src := deduphttp.StripeEventID()
		quiet := &dedup.Config{Logger: slog.New(slog.DiscardHandler)} // the panic is logged
		h := newWebhook(t, s, src, &deduphttp.WebhookOptions{Config: quiet}).Wrap(webhookHandler(&log, src, func(run int) int { return answers[run-1] }, nil))
		for i, want := range answers {
			r := serveRecorded(h, stripeDelivery(stripeEvent))
			require.False(t, r.replayed(), "attempt %d: %s", i+1, r.Body)
			switch want {
			case -1:
				require.Equal(t, http.StatusInternalServerError, r.Status)
				require.Equal(t, deduphttp.CodeHandlerPanic, r.problem(t).Code)
			default:
				require.Equal(t, want, r.Status, "attempt %d: %s", i+1, r.Body)
				require.Contains(t, string(r.Body), fmt.Sprintf(`"run":%d`, i+1), "attempt %d ran the handler", i+1)
			}
		}
		require.Greater(t, len(answers)-1, 5, "more failures than the receiver's default limit")
		done := serveRecorded(h, stripeDelivery(stripeEvent))
		require.True(t, done.replayed())
		require.Contains(t, string(done.Body), fmt.Sprintf(`"run":%d,"status":200`, len(answers)))
		require.Equal(t, len(answers), log.get(stripeEventID))
	})
}

// TestWebhookRetentionDefault: an event's record is kept for
// DefaultWebhookRetention (7 days): a redelivery at the end of the longest
// documented automatic retry window (the Standard Webhooks example
// schedule's last attempt, 75h35m05s after the first; Stripe's three days
// before it) and one of GitHub's manual redeliveries of a delivery up to 3
// days old (7 on GitHub Enterprise Server) are replayed; the record is gone
// after 7 days. Config.Retention overrides it.
func TestWebhookRetentionDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, 7*24*time.Hour, deduphttp.DefaultWebhookRetention)
	for _, tc := range []struct {
		retention time.Duration // Config.Retention; 0: the default
		kept      time.Duration
	}{{0, deduphttp.DefaultWebhookRetention}, {time.Hour, time.Hour}} {
		t.Run(tc.kept.String(), func(t *testing.T) {
			t.Parallel()
			epoch := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
			clk := clock.NewFake(epoch)
			s, err := memstore.New(&memstore.Options{Clock: clk})
			require.NoError(t, err)
			var log eventLog
			src := deduphttp.StandardWebhookID()
			h := newWebhook(t, s, src, &deduphttp.WebhookOptions{Config: &dedup.Config{Clock: clk, Retention: tc.retention}}).
				Wrap(webhookHandler(&log, src, nil, nil))
			deliver := func() reply { return serveRecorded(h, standardWebhook(swID, swTimestamp, swSignature, swPayload)) }
			require.False(t, deliver().replayed())
			rec, err := s.Get(t.Context(), "orders:"+deduphttp.RecordID("sender", "", swID, 0))
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, rec.State)
			require.Equal(t, tc.kept, rec.ExpiresAt.Sub(clk.Now()))

			if tc.retention == 0 {
				for _, at := range []time.Duration{
					72 * time.Hour, // Stripe: up to three days
					75*time.Hour + 35*time.Minute + 5*time.Second, // Standard Webhooks: the example schedule's last attempt
					7*24*time.Hour - time.Minute,                  // GitHub Enterprise Server: a manual redelivery of a 7-day-old delivery
				} {
					clk.Set(epoch.Add(at))
					require.True(t, deliver().replayed(), "a redelivery %v after the first is replayed", at)
				}
			}
			clk.Set(epoch.Add(tc.kept + time.Second))
			require.False(t, deliver().replayed(), "past the retention the event is new again")
			require.Equal(t, 2, log.get(swID))
		})
	}
}

// TestWebhookSenderGivesUp: a sender that stops waiting before the handler
// finishes (GitHub after 10 seconds) does not cancel it: the handler
// completes the event, a retry while it runs gets 503, and the retry after
// it gets the completed response. The handler ran once.
func TestWebhookSenderGivesUp(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var log eventLog
		hold := make(chan struct{})
		var release sync.Once
		exited := make(chan struct{}, 4)
		src := deduphttp.GitHubDelivery()
		inner := webhookHandler(&log, src, nil, hold)
		srv := serve(t, newWebhook(t, s, src, nil).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { exited <- struct{}{} }()
			inner.ServeHTTP(w, r)
		})))
		t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the server closes, should the test fail
		c := client(t)
		deliver := func(ctx context.Context) (reply, error) {
			r := gitHubDelivery(ghDelivery, ghHookID, "issues", ghIssuesOpened, ghSecret)
			hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/webhooks/github", strings.NewReader(ghIssuesOpened))
			if err != nil {
				return reply{}, err
			}
			hr.Header = r.Header
			return send(c, hr)
		}

		// The sender's timeout: it gives up once the handler has begun.
		ctx, giveUp := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() {
			_, err := deliver(ctx)
			gaveUp <- err
		}()
		require.Eventually(t, func() bool { return log.get(ghDelivery) == 1 }, testenv.WaitTimeout, time.Millisecond)
		giveUp()
		require.ErrorIs(t, testenv.Recv(t, gaveUp, "the sender giving up"), context.Canceled)

		busy, err := deliver(t.Context())
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, busy.Status, "the first delivery's handler still runs: %s", busy.Body)

		release.Do(func() { close(hold) })
		testenv.Recv(t, exited, "the first delivery's handler finishing")
		var done reply
		require.Eventually(t, func() bool {
			done, err = deliver(t.Context())
			return err == nil && done.Status != http.StatusServiceUnavailable
		}, testenv.WaitTimeout, 10*time.Millisecond, "the completion of the first delivery is recorded")
		require.Equal(t, http.StatusOK, done.Status, "%s", done.Body)
		require.True(t, done.replayed(), "the retry gets the response of the run the sender gave up on")
		require.Contains(t, string(done.Body), `"run":1`)
		require.Equal(t, 1, log.get(ghDelivery))
	})
}

// TestWebhookResponseNotKept: a duplicate of an event whose response was
// too large to keep is answered with the status the event completed with
// and no body, never 410 Gone (which a Standard Webhooks sender takes for
// "disable this endpoint").
func TestWebhookResponseNotKept(t *testing.T) {
	t.Parallel()
	var log eventLog
	src := deduphttp.StandardWebhookID()
	h := newWebhook(t, newMemstore(t), src, &deduphttp.WebhookOptions{MaxResponseSize: 16}).
		Wrap(webhookHandler(&log, src, func(int) int { return http.StatusAccepted }, nil))
	first := serveRecorded(h, standardWebhook(swID, swTimestamp, swSignature, swPayload))
	require.Equal(t, http.StatusAccepted, first.Status)
	require.Greater(t, len(first.Body), 16)
	dup := serveRecorded(h, standardWebhook(swID, swTimestamp, swSignature, swPayload))
	require.Equal(t, http.StatusAccepted, dup.Status)
	require.True(t, dup.replayed())
	require.Empty(t, dup.Body)
	require.Equal(t, 1, log.get(swID))
}

// TestWebhookOtherMethods: only POST is deduplicated; a GET to the
// endpoint (a health check) passes through without an id.
func TestWebhookOtherMethods(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	h := newWebhook(t, s, deduphttp.StandardWebhookID(), nil).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	r := serveRecorded(h, httptest.NewRequest(http.MethodGet, "/webhooks/svix", nil))
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "ok", string(r.Body))
	require.Zero(t, records(t, s))
}

// TestNewWebhookOptions: options NewWebhook refuses, each an error
// matching dedup.ErrInvalidConfig that names the field.
func TestNewWebhookOptions(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	src := deduphttp.StandardWebhookID()
	for name, tc := range map[string]struct {
		opts *deduphttp.WebhookOptions
		say  string
	}{
		"nil":                  {nil, "Source is not set"},
		"no source":            {&deduphttp.WebhookOptions{Sender: "svix"}, "Source is not set"},
		"no sender":            {&deduphttp.WebhookOptions{Source: src}, "Sender is not set"},
		"sender and principal": {&deduphttp.WebhookOptions{Source: src, Sender: "svix", Principal: func(*http.Request) string { return "" }}, "both set"},
		"codec":                {&deduphttp.WebhookOptions{Source: src, Sender: "svix", Config: &dedup.Config{Codec: dedup.JSONCodec{}}}, "Codec"},
		"request size":         {&deduphttp.WebhookOptions{Source: src, Sender: "svix", MaxRequestSize: -1}, "MaxRequestSize"},
		"retry after":          {&deduphttp.WebhookOptions{Source: src, Sender: "svix", InFlightRetryAfter: -time.Second}, "InFlightRetryAfter"},
	} {
		_, err := deduphttp.NewWebhook(s, tc.opts)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
		require.ErrorContains(t, err, tc.say, name)
	}
	// The options are not changed by NewWebhook.
	cfg := &dedup.Config{Namespace: "svix"}
	_, err := deduphttp.NewWebhook(s, &deduphttp.WebhookOptions{Source: src, Sender: "svix", Config: cfg})
	require.NoError(t, err)
	require.Equal(t, &dedup.Config{Namespace: "svix"}, cfg)
	require.False(t, errors.Is(err, dedup.ErrInvalidConfig))
}
