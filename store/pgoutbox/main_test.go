package pgoutbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests of the relay on real brokers (JetStream, RabbitMQ, Kafka),
// end to end included, are in the test-only module of e2e/, so that this
// module requires no broker client.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
