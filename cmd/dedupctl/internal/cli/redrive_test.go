package cli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedup-go/dedup/internal/testenv"
)

// redriveRun runs dedupctl in process and returns its exit code, stdout
// and stderr; a run past a minute fails the test.
func redriveRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	require.NoError(t, ctx.Err(), "dedupctl %v ran past a minute", args)
	return code, out.String(), errOut.String()
}

// redriveStoreFlags name the shared Redis (the flags are checked before
// any broker is reached).
func redriveStoreFlags(t *testing.T) []string {
	addr := testenv.Redis.Addr(t)
	if !strings.Contains(addr, "://") {
		addr = "redis://" + addr
	}
	return []string{"--redis", addr}
}

func TestRedriveUsage(t *testing.T) {
	t.Parallel()
	nats := []string{"redrive", "nats", "--nats", "nats://127.0.0.1:4222", "--stream", "DLQ", "--redis", "redis://127.0.0.1:6379"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no broker", []string{"redrive"}, "name the broker"},
		{"unknown broker", []string{"redrive", "sqs"}, "unknown command"},
		{"no server", []string{"redrive", "nats", "--stream", "DLQ"}, "no NATS server: give --nats URL ($DEDUP_NATS_URL)"},
		{"no stream", []string{"redrive", "nats", "--nats", "nats://127.0.0.1:4222"}, "no dead-letter stream"},
		{"no amqp", []string{"redrive", "rabbitmq", "--queue", "dlq"}, "no RabbitMQ broker: give --amqp URL ($DEDUP_AMQP_URL)"},
		{"no queue", []string{"redrive", "rabbitmq", "--amqp", "amqp://127.0.0.1:5672/"}, "no dead-letter queue"},
		{"no brokers", []string{"redrive", "kafka", "--topic", "dlq"}, "no Kafka broker: give --brokers HOST:PORT,... ($DEDUP_KAFKA_BROKERS)"},
		{"no topic", []string{"redrive", "kafka", "--brokers", "127.0.0.1:9092"}, "no dead-letter topic"},
		{"bad since", append(nats, "--since", "yesterday"), `--since "yesterday"`},
		{"negative since", append(nats, "--since", "-2h"), `--since "-2h"`},
		{"negative limit", append(nats, "--limit", "-1"), "--limit -1"},
		{"bad key-from", append(nats, "--key-from", "body", "--namespace", "orders"), `key-from "body"`},
		{"key-from without namespace", append(nats, "--key-from", "message-id"), "--key-from needs the receivers' namespace: give --namespace ($DEDUP_NAMESPACE)"},
		{"no store", nats[:6], "no store"},
		{"argument", append(nats, "extra"), "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := redriveRun(t, tc.args...)
			require.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}

// TestRedriveUnreachableBroker: a server that accepts connections and
// never answers, and a port nobody listens on, fail within --timeout, the
// error naming the address.
func TestRedriveUnreachableBroker(t *testing.T) {
	t.Parallel()
	silent := testenv.SilentServer(t)
	closed := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	for _, addr := range []string{silent, closed} {
		for _, tc := range []struct {
			args  []string
			where string
		}{
			{[]string{"nats", "--nats", "nats://" + addr, "--stream", "DLQ"}, "NATS nats://" + addr},
			{[]string{"rabbitmq", "--amqp", "amqp://guest:secret@" + addr + "/", "--queue", "dlq"}, "RabbitMQ amqp://guest:xxxxx@" + addr + "/"},
			{[]string{"kafka", "--brokers", addr, "--topic", "dlq"}, "Kafka " + addr},
		} {
			args := append(append([]string{"--timeout", "500ms", "redrive"}, tc.args...), redriveStoreFlags(t)...)
			code, _, stderr := redriveRun(t, args...)
			require.Equal(t, ExitError, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.where)
			require.NotContains(t, stderr, "secret")
		}
	}
}

// TestRedriveDestinationNotFound: a dead-letter stream or queue that does
// not exist is "not found" (exit 3).
func TestRedriveDestinationNotFound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nats", "--nats", testenv.NATS.Addr(t), "--stream", "NO_SUCH_STREAM_FOR_DEDUPCTL"}, `stream "NO_SUCH_STREAM_FOR_DEDUPCTL"`},
		{[]string{"rabbitmq", "--amqp", testenv.RabbitMQ.Addr(t), "--queue", "no.such.queue.for.dedupctl"}, `queue "no.such.queue.for.dedupctl"`},
		{[]string{"kafka", "--brokers", redriveKafka(t), "--topic", "no.such.topic"}, `topic "no.such.topic"`},
	} {
		code, _, stderr := redriveRun(t, append(append([]string{"redrive"}, tc.args...), redriveStoreFlags(t)...)...)
		require.Equal(t, ExitNotFound, code, "stderr: %s", stderr)
		require.Contains(t, stderr, tc.want)
	}
}

// redriveKafka starts an in-process Kafka cluster (kfake) for the test.
func redriveKafka(t *testing.T) string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.dlq"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
