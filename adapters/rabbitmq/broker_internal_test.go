package dedupamqp

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// TestCountingRule: which returns a quorum queue counts towards its
// x-delivery-limit, from the server properties: Nack too before RabbitMQ
// 4.0, and on any broker whose version cannot be read; Reject only from
// 4.0.
func TestCountingRule(t *testing.T) {
	t.Parallel()
	for version, nackCounts := range map[string]bool{
		"3.10.7": true, "3.13.7": true, "4.0.0": false, "4.1.2": false, "10.0": false, "": true, "x.y": true,
	} {
		b := readBroker(amqp.Table{"product": "RabbitMQ", "version": version})
		require.Equal(t, nackCounts, b.nackCounts, version)
	}
	require.True(t, readBroker(amqp.Table{"product": "LavinMQ", "version": "4.0.0"}).nackCounts, "another broker: assume the stricter rule")
	require.True(t, readBroker(nil).nackCounts)
}
