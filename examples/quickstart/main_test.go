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

// TestQuickstart runs the scenario on its embedded server and checks what it
// reports: each order charged once, the lost ack and the producer retries
// answered as duplicates, the transient failure retried, the slow charge
// not redelivered, and both poison messages dead-lettered with their reason.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	report := out.String()
	t.Log("\n" + report)

	for _, id := range []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+id+`  charged 1 time\(s\): \[ch_\d{3}\]$`), report)
	}
	require.Contains(t, report, "Every order charged exactly once: true")
	// Order 1: charged by worker A, whose ack was lost; its redelivery to
	// worker B is answered from the record.
	require.Regexp(t, `(?m)^order-1  charged 1 time\(s\): \[ch_\d{3}\]
    worker-a  seq 1, delivery 1: processed, but the ack was lost with the process
    worker-b  seq 1, delivery 2: duplicate: answered with the first receipt -> ack
order-2 `, report)
	require.Equal(t, 3, countMatches(report, `(?m)^    worker-b  seq \d+, delivery \d+: duplicate: answered with the first receipt -> ack$`),
		"order 1 redelivered, orders 2 and 5 published again")
	require.Regexp(t, `(?m)^order-3  charged 1 time\(s\): \[ch_\d{3}\]
    worker-b  seq (\d+), delivery 1: handler failed \(payment gateway timeout\) -> nak, retry in 100ms
    worker-b  seq (\d+), delivery 2: processed -> ack
`, report)
	require.Regexp(t, `(?m)^    \(charging took 1.5s, past the 1s AckWait`, report)
	require.Regexp(t, `(?m)^poison  seq \d+ dead-lettered \(undecodable\) to dlq.orders: .*unexpected end of JSON input$`, report)
	require.Regexp(t, `(?m)^poison  seq \d+ dead-lettered \(no-key\) to dlq.orders: .*message has no id`, report)
	require.Equal(t, 2, countMatches(report, `(?m)^poison `))
}

func countMatches(s, re string) int { return len(regexp.MustCompile(re).FindAllString(s, -1)) }
