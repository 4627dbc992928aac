package dedupamqp

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// brokerInfo is what the broker said of itself when the connection opened
// (its server properties).
type brokerInfo struct {
	product, version string
	// nackCounts: a Nack(requeue=true) counts towards a quorum queue's
	// x-delivery-limit, as on RabbitMQ before 4.0 (and, for safety, on a
	// broker whose version cannot be read). From 4.0 only
	// Reject(requeue=true) counts.
	nackCounts bool
}

// readBroker reads the product and version from a connection's server
// properties.
func readBroker(props amqp.Table) brokerInfo {
	product, _ := props["product"].(string)
	version, _ := props["version"].(string)
	b := brokerInfo{product: product, version: version, nackCounts: true}
	if major, ok := majorVersion(version); ok && major >= 4 && strings.EqualFold(product, "RabbitMQ") {
		b.nackCounts = false
	}
	return b
}

// majorVersion is the number before the first dot of "3.10.7".
func majorVersion(v string) (int, bool) {
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	return n, err == nil
}

// logBroker logs the broker's version and, for a queue that may be a
// quorum queue (Options.QueueType quorum or unknown), which returns it
// counts towards its x-delivery-limit there: a classic queue has none.
func (c *Consumer[T, R]) logBroker(ctx context.Context, conn *amqp.Connection) {
	b := readBroker(conn.Properties)
	c.broker = b
	attrs := []any{slog.String("queue", c.queue), slog.String("product", b.product), slog.String("version", b.version)}
	if c.opts.QueueType == Classic {
		c.opts.Logger.InfoContext(ctx, "dedupamqp: connected to "+b.product+" "+b.version, attrs...)
		return
	}
	rule := "counts Reject(requeue=true) and Nack(requeue=true) towards its x-delivery-limit (RabbitMQ before 4.0)"
	if !b.nackCounts {
		rule = "counts only Reject(requeue=true) towards its x-delivery-limit (RabbitMQ 4.0 and later), not Nack"
	}
	queue := "the quorum queue " + rule
	if c.opts.QueueType == "" {
		queue = "a quorum queue (Options.QueueType unknown) " + rule
	}
	c.opts.Logger.InfoContext(ctx, "dedupamqp: connected to "+b.product+" "+b.version+": "+queue+"; a delivery the store cannot take is held in place, not returned, until ConsumerTimeout nears",
		append(attrs, slog.Bool("nack_counts_towards_delivery_limit", b.nackCounts))...)
}
