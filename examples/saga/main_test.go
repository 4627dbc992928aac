package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSaga runs the scenario on its embedded server and checks what it
// reports: every step's effect once per order; order 1's charge replayed on
// worker B after worker A died between the steps; order 2's copy answered
// without a step; order 3 refunded once, its reservation never made and the
// message dead-lettered as a permanent error; order 4's retry replaying
// charge and reserve and running notify again; and the receivers' counts of
// steps run, replayed and compensated.
func TestSaga(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	report := out.String()
	t.Log("\n" + report)

	// Order 1: worker A charged it and died before reserve; worker B got it
	// after AckWait and replayed the charge from its record.
	require.Contains(t, report, `order-1
    gateway    1 charge request(s), charged [ch_1.1], 0 refund request(s), refunded []
    warehouse  1 reserve call(s), reserved [rs_1.1], released []
    mailer     1 send call(s), sent [em_1.1 (ch_1.1, rs_1.1)]
    worker-a   seq 1, delivery 1: charge ran: the process died (canceled -> nak, which never reached the broker)
    worker-b   seq 1, delivery 2: charge replayed, reserve ran, notify ran: processed -> ack
order-2
`)
	// Order 2: the producer's copy is a duplicate; no step runs for it.
	require.Contains(t, report, `order-2
    gateway    1 charge request(s), charged [ch_2.1], 0 refund request(s), refunded []
    warehouse  1 reserve call(s), reserved [rs_2.1], released []
    mailer     1 send call(s), sent [em_2.1 (ch_2.1, rs_2.1)]
    worker-b   seq 2, delivery 1: charge ran, reserve ran, notify ran: processed -> ack
    worker-b   seq 3, delivery 1: no step ran: duplicate: answered with the first receipt -> ack
order-3
`)
	// Order 3: out of stock for good; the charge refunded once, nothing
	// reserved or released, nothing sent, given up at once.
	require.Contains(t, report, `order-3
    gateway    1 charge request(s), charged [ch_3.1], 1 refund request(s), refunded [re_3.1 of ch_3.1]
    warehouse  1 reserve call(s), reserved [], released []
    mailer     0 send call(s), sent []
    worker-b   seq 4, delivery 1: charge ran, reserve failed: given up (permanent-error): compensations ran -> dead-letter
order-4
`)
	// Order 4: the mailer failed once; the retry replays charge and
	// reserve, and runs notify again.
	require.Contains(t, report, `order-4
    gateway    1 charge request(s), charged [ch_4.1], 0 refund request(s), refunded []
    warehouse  1 reserve call(s), reserved [rs_4.1], released []
    mailer     2 send call(s), sent [em_4.1 (ch_4.1, rs_4.1)]
    worker-b   seq 5, delivery 1: charge ran, reserve ran, notify failed: handler failed (mailer unavailable) -> nak, retry in 100ms
    worker-b   seq 5, delivery 2: charge replayed, reserve replayed, notify ran: processed -> ack

`)
	require.Equal(t, 3, countMatches(report, `(charge|reserve|notify) replayed`), "order 1's charge, order 4's charge and reserve")

	// The one dead letter: order 3, for its permanent error.
	require.Regexp(t, `(?m)^Dead letters in dlq.orders:
    order-3  seq 4, reason permanent-error: .*"fulfilment:order-3".*: out of stock
\n`, report)
	require.Equal(t, 1, countMatches(report, `(?m)^    order-\d  seq \d+, reason `))

	// Worker A ran the charge; worker B the nine other steps, and replayed
	// three; one compensation ran, the refund (reserve never completed for
	// order 3, so nothing was released).
	require.Contains(t, report, "\nworker-a's receiver: 1 step(s) run, 0 replayed, 0 compensation(s) run, 0 failed\n")
	require.Contains(t, report, "\nworker-b's receiver: 9 step(s) run, 3 replayed, 1 compensation(s) run, 0 failed\n")

	require.Contains(t, report, "\nEvery step's effect happened once: true\n")
	require.Contains(t, report, "\nOrder 3 refunded once: true\n")
}

func countMatches(s, re string) int { return len(regexp.MustCompile(re).FindAllString(s, -1)) }
