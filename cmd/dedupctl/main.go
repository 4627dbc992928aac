// Command dedupctl inspects, forgets and redrives the records and dead
// letters of dedup: it reads a Redis or PostgreSQL store of records, and
// moves dead letters of a NATS JetStream stream, a RabbitMQ queue or a
// Kafka topic back to where they came from.
//
//	go install github.com/dedup-go/dedup/cmd/dedupctl@latest
//
// See docs/operations.md for every command, with a transcript.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
