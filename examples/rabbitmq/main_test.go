package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExample runs the example against the shared RabbitMQ.
func TestExample(t *testing.T) {
	url := testenv.RabbitMQ.Addr(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, url, &out))
	t.Log("\n" + out.String())
	for i := range 5 {
		require.Contains(t, out.String(), "order-"+string(rune('0'+i))+" charged 1 time(s)")
	}
	require.Contains(t, out.String(), "decisions: map[duplicate:5 handler-error:1 processed:5 undecodable:1]")
	require.Contains(t, out.String(), "retried through the tier: 1, dead letters: 1")
	require.Contains(t, out.String(), "consumer stats: {Delivered:12 Acked:10 RetriedInPlace:0 RetriedLater:1 DeadLettered:1 ")
	require.Contains(t, out.String(), `dead letter "not json": reason undecodable`)
}
