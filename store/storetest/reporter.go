package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// reporterCases pin store.CompleteReporter: a Complete reports
// CompletionWrote exactly when it completed the record, and
// CompletionUnchanged when the token had completed it already, so that a
// cache in front of the store can keep what the store keeps.
var reporterCases = []testCase{
	{"Single", testReportComplete},
	{"Concurrent", testReportConcurrent},
	{"Batch", testReportBatch},
}

// reporter returns the store as a CompleteReporter, or skips.
func (f *fixture) reporter(t *testing.T) store.CompleteReporter {
	t.Helper()
	r, ok := f.store.(store.CompleteReporter)
	if !ok {
		t.Skip("the store does not implement store.CompleteReporter")
	}
	return r
}

// reportWrote calls CompleteReport for the token holding key and requires
// that it wrote the record. It skips when the store answers
// CompletionUnknown: a wrapper over a store that cannot tell.
func (f *fixture) reportWrote(t *testing.T, r store.CompleteReporter, key string, token store.Token, result string) {
	t.Helper()
	var (
		c   store.Completion
		err error
	)
	w := f.during(func() { c, err = r.CompleteReport(f.ctx, f.completeRequest(key, token, result)) })
	f.requireNoLoss(t, key, err, "CompleteReport")
	f.note(key, w.earliest(f.retention()))
	if c == store.CompletionUnknown {
		t.Skip("the store cannot tell what a Complete wrote (CompletionUnknown)")
	}
	require.Equal(t, store.CompletionWrote, c, "CompleteReport(%q) with the holder's token completed the record", key)
}

func testReportComplete(t *testing.T, f *fixture) {
	r := f.reporter(t)
	key := f.key("report")
	c := f.claim(t, key)
	f.reportWrote(t, r, key, c.Token, "first")
	first := f.requireCompleted(t, key, []byte("first"))

	// Again with the token that completed it: nothing changes.
	again, err := r.CompleteReport(f.ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("second"), Retention: 3 * f.retention()})
	f.expectKept(t, key, err == nil, "CompleteReport with the token that completed the record: %v", err)
	require.Equal(t, store.CompletionUnchanged, again, "CompleteReport with the token that completed the record")
	rec := f.requireCompleted(t, key, []byte("first"))
	requireSameTime(t, first.ExpiresAt, rec.ExpiresAt, "a second Complete must not move ExpiresAt")

	// Another token holds nothing.
	stale, err := r.CompleteReport(f.ctx, f.completeRequest(key, staleToken(), "third"))
	requireLeaseLost(t, err, "CompleteReport of a completed key with another token")
	require.Equal(t, store.CompletionUnknown, stale, "a failed CompleteReport reports CompletionUnknown")

	// A record completed by plain Complete is found completed too.
	other := f.key("report-plain")
	oc := f.claim(t, other)
	f.complete(t, other, oc.Token, []byte("plain"))
	got, err := r.CompleteReport(f.ctx, f.completeRequest(other, oc.Token, "later"))
	f.expectKept(t, other, err == nil, "CompleteReport after Complete with the same token: %v", err)
	require.Equal(t, store.CompletionUnchanged, got, "CompleteReport after Complete with the same token")
	f.requireCompleted(t, other, []byte("plain"))
}

// testReportConcurrent: of many concurrent completions with one token,
// exactly one wrote the record, and the record holds its result.
func testReportConcurrent(t *testing.T, f *fixture) {
	r := f.reporter(t)
	key := f.key("report-concurrent")
	c := f.claim(t, key)
	const n = 8
	reqs := make([]store.CompleteRequest, n)
	for i := range reqs {
		reqs[i] = f.completeRequest(key, c.Token, fmt.Sprint("r", i))
	}
	done := make([]store.Completion, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			done[i], errs[i] = r.CompleteReport(f.ctx, reqs[i])
		})
	}
	w := f.during(func() {
		close(start)
		wg.Wait()
	})
	f.note(key, w.earliest(f.retention()))
	wrote := -1
	for i := range n {
		f.requireNoLoss(t, key, errs[i], "CompleteReport")
		switch done[i] {
		case store.CompletionWrote:
			require.Equal(t, -1, wrote, "CompleteReport calls %d and %d both report they wrote the record", wrote, i)
			wrote = i
		case store.CompletionUnknown:
			t.Skip("the store cannot tell what a Complete wrote (CompletionUnknown)")
		}
	}
	require.NotEqual(t, -1, wrote, "one of the concurrent completions wrote the record: %v", done)
	f.requireCompleted(t, key, fmt.Append(nil, "r", wrote))
}

// testReportBatch: CompleteBatchReport reports as CompleteReport would,
// request by request, a key repeated with its token written by its first
// request.
func testReportBatch(t *testing.T, f *fixture) {
	r := f.reporter(t)
	k1, k2, k3, k4, k5 := f.key("one"), f.key("two"), f.key("three"), f.key("four"), f.key("five")
	t1, t2, t4, t5 := f.claim(t, k1).Token, f.claim(t, k2).Token, f.claim(t, k4).Token, f.claim(t, k5).Token
	f.claim(t, k3) // held by a token the batch does not have
	f.complete(t, k2, t2, []byte("before"))

	var out []store.CompleteOutcome
	w := f.during(func() {
		out = r.CompleteBatchReport(f.ctx, []store.CompleteRequest{
			f.completeRequest(k1, t1, "r1"),
			f.completeRequest(k2, t2, "again"),
			f.completeRequest(k1, t1, "again"),
			f.completeRequest(k3, staleToken(), "stale"),
			{Key: k4, Token: t4, Result: []byte("r4"), Retention: 0},
			f.completeRequest(k5, t5, "r5"),
		})
	})
	require.Len(t, out, 6, "CompleteBatchReport returns one outcome per request")
	f.note(k1, w.earliest(f.retention()))
	f.note(k5, w.earliest(f.retention()))
	f.requireNoLoss(t, k1, out[0].Err, "CompleteBatchReport")
	if out[0].Completion == store.CompletionUnknown {
		t.Skip("the store cannot tell what a Complete wrote (CompletionUnknown)")
	}
	want := []store.Completion{
		store.CompletionWrote, store.CompletionUnchanged, store.CompletionUnchanged,
		store.CompletionUnknown, store.CompletionUnknown, store.CompletionWrote,
	}
	f.expectKept(t, k2, out[1].Err == nil, "a batch request completing again with the token that completed the record: %v", out[1].Err)
	require.NoError(t, out[2].Err, "a batch request completing again with the token an earlier request completed with")
	requireLeaseLost(t, out[3].Err, "a batch request with a stale token")
	require.ErrorIs(t, out[4].Err, store.ErrInvalidConfig, "a batch request with a zero retention")
	f.requireNoLoss(t, k5, out[5].Err, "CompleteBatchReport")
	for i, o := range out {
		require.Equal(t, want[i], o.Completion, "the completion of request %d", i)
	}
	f.requireCompleted(t, k1, []byte("r1"))
	f.requireCompleted(t, k2, []byte("before"))
	f.requireHeld(t, k3, 1)
	f.requireCompleted(t, k5, []byte("r5"))

	// Every request of a batch that found its records completed already.
	keys := []string{k1, k5}
	again := r.CompleteBatchReport(f.ctx, []store.CompleteRequest{f.completeRequest(k1, t1, "x"), f.completeRequest(k5, t5, "y")})
	require.Len(t, again, 2)
	for i, o := range again {
		f.expectKept(t, keys[i], o.Err == nil, "completing again: %v", o.Err)
		require.Equal(t, store.CompletionUnchanged, o.Completion, "the completion of request %d completing again", i)
	}
	f.requireCompleted(t, k1, []byte("r1"))
	f.requireCompleted(t, k5, []byte("r5"))
}
