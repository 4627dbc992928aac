package deduphttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

// retryingClient is deduptest's Target for a server behind the
// middleware: each delivery is one request, and its answer is taken as a
// client that retries until it has one would take it. A replay is a
// duplicate; a 409 for a key in flight, a 5xx and a 429 are retried
// (after Retry-After, on the harness's clock), the middleware's other
// refusals given up on (dead-lettered); any other answer is the
// handler's. The value is the status and body, which every replay must
// repeat.
func retryingClient(c *http.Client, srv *httptest.Server) deduptest.TargetFunc[req, string] {
	return func(ctx context.Context, q req) adapter.Delivery[string] {
		hr, err := q.request(ctx, srv.URL)
		if err != nil {
			return adapter.Delivery[string]{Err: err, Decision: delivery.Decision{Action: delivery.DeadLetter}}
		}
		r, err := send(c, hr)
		if err != nil {
			return adapter.Delivery[string]{Err: err, Decision: delivery.Decision{Action: delivery.Retry}}
		}
		res := dedup.Result[string]{Value: fmt.Sprintf("%d %s", r.Status, r.Body)}
		var p deduphttp.Problem
		refused := r.Header.Get("Content-Type") == deduphttp.ProblemContentType && json.Unmarshal(r.Body, &p) == nil && p.Code != ""
		retryAfter, _ := strconv.Atoi(r.Header.Get("Retry-After"))
		retry := delivery.Decision{Action: delivery.Retry, Delay: time.Duration(retryAfter) * time.Second}
		switch {
		case r.replayed():
			res.Status = delivery.StatusDuplicate
		case refused && p.Code == deduphttp.CodeInFlight:
			res.Status = delivery.StatusInFlight
			return adapter.Delivery[string]{Result: res, Decision: retry}
		case refused && (r.Status >= 500 || r.Status == http.StatusTooManyRequests):
			return adapter.Delivery[string]{Err: fmt.Errorf("%d %s", r.Status, p.Code), Decision: retry}
		case refused:
			return adapter.Delivery[string]{Err: fmt.Errorf("%d %s", r.Status, p.Code), Decision: delivery.Decision{Action: delivery.DeadLetter}}
		case r.Status >= 500 || r.Status == http.StatusTooManyRequests: // the handler failed
			return adapter.Delivery[string]{Err: &dedup.HandlerError{Err: fmt.Errorf("%s", res.Value)}, Decision: retry}
		case r.Header.Get(deduphttp.HeaderBypassed) == "true":
			res.Status = delivery.StatusBypassed
		default:
			res.Status = delivery.StatusProcessed
		}
		return adapter.Delivery[string]{Result: res, Decision: delivery.Decision{Action: delivery.Ack}}
	}
}

// retried sends each of reqs three times through srv, from four clients
// at once in shuffled order, each retried until it has its answer
// (deduptest.Run), and returns the report: a request is named by its
// tenant (quoted, cut at 40 characters), whose effects are the handler's
// runs for it.
func retried(t *testing.T, srv *httptest.Server, reqs []req, runs func(tenant string) int) *deduptest.Report[string] {
	t.Helper()
	name := func(q req) string { return fmt.Sprintf("%.40q", q.tenant) }
	tenants := map[string]string{}
	for _, q := range reqs {
		tenants[name(q)] = q.tenant
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // the clients' retry delays
	rep, err := deduptest.Run(t.Context(), clk, retryingClient(client(t), srv), reqs, &deduptest.Options[req]{
		ID:      name,
		Effects: func(id string) int { return runs(tenants[id]) },
		Idle:    20 * time.Millisecond, // a request's real time before the clock moves
		Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	return rep
}
