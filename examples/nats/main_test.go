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

// TestExample runs the example against the shared NATS server.
func TestExample(t *testing.T) {
	url := testenv.NATS.Addr(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, url, &out))
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "JetStream: 21 messages, 10 charges; decisions map[duplicate:10 processed:10 undecodable:1]")
	require.Contains(t, out.String(), `core request q-1: quote #1: 4200 cents (processed)`)
	require.Contains(t, out.String(), `core request q-1: quote #1: 4200 cents (duplicate)`)
	require.Contains(t, out.String(), "quote handler ran 1 time(s)")
}
