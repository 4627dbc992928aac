package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example against an in-process Kafka cluster (kfake).
func TestRun(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.GroupMinSessionTimeout(500 * time.Millisecond))
	require.NoError(t, err)
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, cluster.ListenAddrs(), &out))
	require.Equal(t, `9 messages: 6 processed, 2 duplicates, 1 dead-lettered (1 undecodable)
consumer: 9 delivered, 8 acked, 1 dead-lettered, 0 settle failures
o-1 charged 100
o-2 charged 200
o-3 charged 300
o-4 charged 400
o-5 charged 500
o-6 charged 600
`, out.String())
}
