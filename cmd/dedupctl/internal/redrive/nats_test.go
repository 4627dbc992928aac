package redrive_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// poisonNATS dead-letters, through the adapter, one message of each
// reason a copy would meet again, and a truncated one: a body without an
// id (no-key), one that is not JSON (undecodable), an order whose id was
// first used with other data (key-reused), and one too large for the
// dead-letter stream, whose letter is cut (truncated). It adds a letter
// without any Dedup-* header.
func poisonNATS(t *testing.T, e *natsEnv) {
	t.Helper()
	// The dead-letter stream takes letters of 4 KiB at most: a 6 KiB
	// order's letter is cut.
	s, err := e.js.Stream(t.Context(), e.dlqStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	_, err = e.js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)

	eff := newEffects()
	e.publish(t, []Order{{ID: "reused", Cents: 1}}, nil)
	stop := e.consume(t, fixedReceiver(t, e.st, e.ns, eff), true)
	e.settled(t)
	stop()
	e.publishData(t, []byte(`{"cents": 5}`), nil)
	e.publishData(t, []byte("not json"), nil)
	e.publish(t, []Order{{ID: "reused", Cents: 2}}, nil)
	e.publishData(t, orderJSON(t, Order{ID: "big", Cents: 3, Pad: string(bytes.Repeat([]byte("x"), 6000))}), nil)
	stop = e.consume(t, brokenReceiver(t, e.st, e.ns), true)
	e.waitDLQ(t, 4)
	e.settled(t)
	stop()
	e.publishLetter(t, []byte(`{"id":"plain"}`), natsgo.Header{"Source": []string{"a producer"}})
}

// TestNATSSkips: the letters a copy would meet again, a truncated one and
// one without dedup headers are each reported skipped with their reason;
// nothing is republished, nothing removed, no record touched.
func TestNATSSkips(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	poisonNATS(t, e)
	reused, _ := e.st.record(t, "orders:reused")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	whys := map[string]int{}
	for _, r := range res.rows {
		require.Equal(t, "skipped", r.Action, "row %+v", r)
		whys[r.Why]++
	}
	require.Equal(t, map[string]int{"no-key": 1, "undecodable": 1, "key-reused": 1, "truncated": 1, "no-dedup-headers": 1}, whys)
	require.Equal(t, 5, res.summary.Skips["no-key"]+res.summary.Skips["undecodable"]+res.summary.Skips["key-reused"]+
		res.summary.Skips["truncated"]+res.summary.Skips["no-dedup-headers"])
	require.EqualValues(t, 5, e.count(t, e.dlqStream), "every letter left in place")
	require.EqualValues(t, 5, e.count(t, e.stream), "nothing republished: the five originals alone")
	after, found := e.st.record(t, "orders:reused")
	require.True(t, found)
	require.Equal(t, reused, after, "the reused key's record untouched")
}

// TestNATSForce: --force republishes the no-key, undecodable and
// key-reused letters, never the truncated one nor the one without dedup
// headers.
func TestNATSForce(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	poisonNATS(t, e)
	before := e.count(t, e.stream)

	res := runTool(t, nil, e.args("--force")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	got := map[string]string{}
	for _, r := range res.rows {
		got[r.Reason+"/"+r.Why] = r.Action
	}
	require.Equal(t, map[string]string{
		"no-key/": "republished", "undecodable/": "republished", "key-reused/": "republished",
		"attempts-exhausted/truncated": "skipped", "/no-dedup-headers": "skipped",
	}, got)
	require.EqualValues(t, 2, e.count(t, e.dlqStream), "the truncated letter and the unmarked one stay")
	require.Equal(t, before+3, e.count(t, e.stream), "three copies republished")
}

// TestNATSDryRun: a dry run reports what a run would do and changes
// nothing: the letters stay, the failed records stay, nothing is
// published.
func TestNATSDryRun(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("a", "b", "c"))
	completeRecord(t, e.st, "orders:b")
	before := e.count(t, e.stream)

	res := runTool(t, nil, e.args("--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Equal(t, "would-republish", rows["orders:a"].Action)
	require.Equal(t, "would-remove-completed", rows["orders:b"].Action)
	require.Equal(t, "would-republish", rows["orders:c"].Action)
	require.EqualValues(t, 3, e.count(t, e.dlqStream))
	require.Equal(t, before, e.count(t, e.stream))
	rec, found := e.st.record(t, "orders:a")
	require.True(t, found)
	require.Equal(t, store.StateFailed, rec.State, "the failed record not forgotten")
}

// completeRecord makes key's record completed, as a copy handled
// elsewhere would.
func completeRecord(t testing.TB, st testStore, key string) {
	t.Helper()
	require.NoError(t, st.Delete(t.Context(), key))
	c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	require.NoError(t, st.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(`"done"`), Retention: time.Hour}))
}

// holdRecord makes key's record processing under a live lease, as a copy
// running now would.
func holdRecord(t testing.TB, st testStore, key string) {
	t.Helper()
	require.NoError(t, st.Delete(t.Context(), key))
	c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Acquired)
}

// TestNATSRecordDecides: a letter whose key is completed is removed and
// not republished; one whose key is held under a live lease is left and
// not republished, its record untouched; one whose record failed is
// forgotten and republished.
func TestNATSRecordDecides(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("done", "held", "failed"))
	completeRecord(t, e.st, "orders:done")
	holdRecord(t, e.st, "orders:held")
	held, _ := e.st.record(t, "orders:held")
	before := e.count(t, e.stream)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Equal(t, "removed-completed", rows["orders:done"].Action)
	require.Equal(t, "skipped", rows["orders:held"].Action)
	require.Equal(t, "in-flight", rows["orders:held"].Why)
	require.Equal(t, "republished", rows["orders:failed"].Action)
	require.Equal(t, before+1, e.count(t, e.stream), "only the failed one republished")
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the held one's letter stays")
	after, _ := e.st.record(t, "orders:held")
	require.Equal(t, held, after, "the live claim untouched")
	_, found := e.st.record(t, "orders:failed")
	require.False(t, found, "the failed record forgotten")
	done, _ := e.st.record(t, "orders:done")
	require.Equal(t, store.StateCompleted, done.State)
}

// TestNATSCopyRefused: a destination that refuses the copy (no stream
// captures its subject any more) leaves the letter in place, reports it
// failed, and exits 1.
func TestNATSCopyRefused(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("a"))
	require.NoError(t, e.js.DeleteStream(t.Context(), e.stream))

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 1, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	require.Equal(t, "failed", res.rows[0].Action)
	require.Contains(t, res.rows[0].Detail, e.subject)
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the letter stays")
}

// TestNATSFilters: --reason, --since and --limit choose the letters; the
// others stay, unreported; a filter that matches nothing exits 3.
func TestNATSFilters(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("a", "b"))
	e.publishData(t, []byte(`{"cents": 1}`), nil) // no-key
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, 3)
	stop()
	e.deadLetter(t, orders("c"))

	res := runTool(t, nil, e.args("--reason", "no-key", "--force", "--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1)
	require.Equal(t, "no-key", res.rows[0].Reason)
	require.Equal(t, 3, res.summary.Filtered)

	res = runTool(t, nil, e.args("--reason", "permanent-error")...)
	require.Equal(t, 3, res.code, "nothing matches: stderr %s", res.stderr)
	require.Contains(t, res.stderr, "no dead letter matches --reason permanent-error")

	res = runTool(t, nil, e.args("--since", since(t, e, "orders:c"))...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1)
	require.Equal(t, "orders:c", res.rows[0].Key)
	require.Equal(t, "republished", res.rows[0].Action)

	res = runTool(t, nil, e.args("--limit", "1", "--reason", "attempts-exhausted")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1)
	require.Contains(t, []string{"orders:a", "orders:b"}, res.rows[0].Key, "the first of a and b (the adapter dead-letters them in any order)")
	require.Equal(t, "republished", res.rows[0].Action)
	require.EqualValues(t, 2, e.count(t, e.dlqStream), "the other and the no-key letter stay")
}

// since returns the time of key's letter, RFC 3339 with nanoseconds, for
// --since: the letters of the same second before it must not match.
func since(t *testing.T, e *natsEnv, key string) string {
	t.Helper()
	s, err := e.js.Stream(t.Context(), e.dlqStream)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), e.dlq)
	require.NoError(t, err)
	require.Equal(t, key, m.Header.Get(delivery.HeaderKey))
	return m.Time.UTC().Format(time.RFC3339Nano)
}

// TestNATSRestoresHeaders: the copy has the original's headers back, its
// Nats-Msg-Id and the Nats-* ones the adapter moved aside (but for an
// expected last sequence, long passed), and none of the Dedup-* ones.
func TestNATSRestoresHeaders(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, func(c *jetstream.StreamConfig) { c.Duplicates = 100 * time.Millisecond })
	e.publish(t, orders("a"), func(_ int, h natsgo.Header) {
		h.Set(jetstream.MsgIDHeader, "msg-a")
		h.Set(jetstream.ExpectedStreamHeader, e.stream)
		h.Set(jetstream.ExpectedLastSeqHeader, "0")
		h.Set("Tenant", "acme")
	})
	e.probe(t, "sentinel")
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, 1)
	e.settled(t)
	stop()
	e.waitWindow(t, "sentinel")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	s, err := e.js.Stream(t.Context(), e.stream)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(t.Context(), e.subject)
	require.NoError(t, err)
	require.Equal(t, uint64(4), m.Sequence, "the copy after the original and two probes")
	require.Equal(t, "msg-a", m.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, e.stream, m.Header.Get(jetstream.ExpectedStreamHeader))
	require.Empty(t, m.Header.Get(jetstream.ExpectedLastSeqHeader))
	require.Equal(t, "acme", m.Header.Get("Tenant"))
	for k := range m.Header {
		require.NotContains(t, k, "Dedup-", "header %s", k)
	}
	require.JSONEq(t, `{"id":"a","cents":100}`, string(m.Data))
}

// TestNATSDuplicateWindow: while the orders stream still remembers the
// original's Nats-Msg-Id, the copy is dropped as a duplicate: the letter
// is left and reported (duplicate-window), not removed as if redriven.
func TestNATSDuplicateWindow(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, func(c *jetstream.StreamConfig) { c.Duplicates = time.Hour })
	e.publish(t, orders("a"), func(_ int, h natsgo.Header) { h.Set(jetstream.MsgIDHeader, "msg-a") })
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, 1)
	e.settled(t)
	stop()

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "skipped", res.rows[0].Action)
	require.Equal(t, "duplicate-window", res.rows[0].Why)
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the letter stays")
	require.EqualValues(t, 1, e.count(t, e.stream), "the original alone")
}

// TestNATSDuplicateOfEarlierCopy: a copy the stream drops as a duplicate
// of another message than the original (an earlier copy, published by a
// run that crashed before removing the letter) is there already: the
// letter is removed, and the stream holds that one copy.
func TestNATSDuplicateOfEarlierCopy(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, func(c *jetstream.StreamConfig) { c.Duplicates = time.Hour })
	// The earlier copy, sequence 1 of the orders stream.
	e.publish(t, orders("a"), func(_ int, h natsgo.Header) { h.Set(jetstream.MsgIDHeader, "msg-a") })
	// The letter of an original that was sequence 7, whose id the
	// stream has forgotten since.
	e.publishLetter(t, orderJSON(t, Order{ID: "a", Cents: 100}), natsgo.Header{
		delivery.HeaderReason: {"attempts-exhausted"}, delivery.HeaderKey: {"orders:a"},
		delivery.HeaderSource: {e.subject}, delivery.HeaderStream: {e.stream}, delivery.HeaderOffset: {"7"},
		delivery.HeaderOriginalMessageID: {"msg-a"},
	})

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.Equal(t, "msg-a", res.rows[0].MessageID)
	require.Zero(t, e.count(t, e.dlqStream), "the letter removed")
	require.EqualValues(t, 1, e.count(t, e.stream), "the earlier copy alone")
}

// TestNATSSubjectFilter: --subject reads only the stream's letters on that
// subject; the others are not even read.
func TestNATSSubjectFilter(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.publishLetterOn(t, e.dlq+".other", []byte(`{"id":"x"}`), natsgo.Header{
		delivery.HeaderReason: {"attempts-exhausted"}, delivery.HeaderSource: {e.subject}, delivery.HeaderKey: {"orders:x"},
	})
	e.deadLetter(t, orders("a"))

	res := runTool(t, nil, e.args("--subject", e.dlq, "--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, 1, res.summary.Read)
	require.Len(t, res.rows, 1)
	require.Equal(t, "orders:a", res.rows[0].Key)
	require.Equal(t, "2", res.rows[0].ID, "the stream's second letter")
}

// TestNATSOnPostgres: the same steps over a PostgreSQL store: a failed
// record is forgotten and its copy runs once, a completed one's letter is
// removed without a copy.
func TestNATSOnPostgres(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.st = newPGStore(t)
	e.deadLetter(t, orders("a", "b"))
	completeRecord(t, e.st, "orders:b")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Equal(t, "republished", rows["orders:a"].Action)
	require.Equal(t, "removed-completed", rows["orders:b"].Action)
	eff := newEffects()
	e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false)
	e.settled(t)
	requireExactlyOnce(t, eff, []string{"a"})
	require.Zero(t, e.count(t, e.dlqStream))
}

// formerNATSNames are the dead-letter headers dedupnats 0.1 wrote, by the
// name of package delivery it writes now.
var formerNATSNames = map[string]string{
	delivery.HeaderSource:            "Dedup-Subject",
	delivery.HeaderConsumerGroup:     "Dedup-Consumer",
	delivery.HeaderOffset:            "Dedup-Sequence",
	delivery.HeaderOriginalMessageID: "Dedup-Msg-Id",
}

// rewriteAsOf01 replaces the dead letter of key by the letter dedupnats 0.1
// would have written: the same data and headers, under the names of 0.1.
// The letter's own Nats-Msg-Id is left off, or the dead-letter stream's
// duplicate window would drop it as a copy of the letter it replaces.
func rewriteAsOf01(t *testing.T, e *natsEnv, key string) {
	t.Helper()
	s, err := e.js.Stream(t.Context(), e.dlqStream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		if m.Header.Get(delivery.HeaderKey) != key {
			continue
		}
		h := natsgo.Header{}
		for k, vs := range m.Header {
			if former, ok := formerNATSNames[k]; ok {
				k = former
			}
			if k != jetstream.MsgIDHeader {
				h[k] = vs
			}
		}
		for name, former := range formerNATSNames {
			if name == delivery.HeaderOriginalMessageID && m.Header.Get(name) == "" {
				continue
			}
			require.NotEmpty(t, h.Get(former), "the adapter's letter has %s", name)
			require.Empty(t, h.Get(name))
		}
		require.NoError(t, s.DeleteMsg(t.Context(), seq))
		e.publishLetter(t, m.Data, h)
		return
	}
	t.Fatalf("no dead letter of %s", key)
}

// TestNATSRedrivesLettersOf01: dead letters written with the header names
// of dedupnats 0.1 (Dedup-Subject, Dedup-Consumer, Dedup-Sequence,
// Dedup-Msg-Id), beside one written with today's, are read and redriven
// alike: each copy is republished to its subject with its Nats-Msg-Id and
// headers back, and the fixed consumer handles each order once.
func TestNATSRedrivesLettersOf01(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, func(c *jetstream.StreamConfig) { c.Duplicates = 100 * time.Millisecond })
	e.publish(t, orders("a", "b"), func(i int, h natsgo.Header) {
		h.Set(jetstream.MsgIDHeader, "msg-"+[]string{"a", "b"}[i])
		h.Set("Tenant", "acme")
	})
	e.probe(t, "sentinel")
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, 2)
	e.settled(t)
	stop()
	e.waitWindow(t, "sentinel")
	rewriteAsOf01(t, e, "orders:a")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	for _, id := range []string{"a", "b"} {
		row := rows["orders:"+id]
		require.Equal(t, "republished", row.Action, "row %+v", row)
		require.Equal(t, "msg-"+id, row.MessageID)
	}
	require.Zero(t, e.count(t, e.dlqStream), "both letters removed")

	// The copies, after the originals and the probes.
	s, err := e.js.Stream(t.Context(), e.stream)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	copies := map[string]*jetstream.RawStreamMsg{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq, jetstream.WithGetMsgSubject(e.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		require.NoError(t, err)
		seq = m.Sequence
		if seq > 2 {
			copies[m.Header.Get(jetstream.MsgIDHeader)] = m
		}
	}
	require.Len(t, copies, 2)
	for _, id := range []string{"a", "b"} {
		m := copies["msg-"+id]
		require.NotNil(t, m, "the copy of %s", id)
		require.Equal(t, e.subject, m.Subject)
		require.Equal(t, "acme", m.Header.Get("Tenant"))
		for k := range m.Header {
			require.NotContains(t, k, "Dedup-", "header %s", k)
		}
	}

	eff := newEffects()
	e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false)
	e.settled(t)
	requireExactlyOnce(t, eff, []string{"a", "b"})
}

// TestNATSDuplicateWindowOf01: a letter of 0.1 whose original the stream
// still remembers (its Dedup-Msg-Id, at its Dedup-Sequence) is left and
// reported as in the duplicate window, as today's letter is: read without
// the names of 0.1, its copy would be taken for an earlier one and the
// letter removed, the message lost.
func TestNATSDuplicateWindowOf01(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, func(c *jetstream.StreamConfig) { c.Duplicates = time.Hour })
	e.publish(t, orders("a"), func(_ int, h natsgo.Header) { h.Set(jetstream.MsgIDHeader, "msg-a") })
	e.publishLetter(t, orderJSON(t, Order{ID: "a", Cents: 100}), natsgo.Header{
		"Dedup-Reason": {"attempts-exhausted"}, "Dedup-Key": {"orders:a"}, "Dedup-Error": {"bug"},
		"Dedup-Subject": {e.subject}, "Dedup-Stream": {e.stream}, "Dedup-Consumer": {e.consumer},
		"Dedup-Sequence": {"1"}, "Dedup-Delivery-Count": {"1"}, "Dedup-Msg-Id": {"msg-a"},
	})

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1)
	require.Equal(t, "skipped", res.rows[0].Action, "row %+v", res.rows[0])
	require.Equal(t, "duplicate-window", res.rows[0].Why)
	require.Equal(t, "msg-a", res.rows[0].MessageID)
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the letter stays")
	require.EqualValues(t, 1, e.count(t, e.stream), "the original alone")
}
