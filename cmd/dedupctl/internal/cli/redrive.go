package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
)

// redriveOptions are the flags of redrive and its broker commands.
type redriveOptions struct {
	reasons []string
	since   string
	limit   int
	dryRun  bool
	force   bool
	keyFrom string
}

func newRedriveCmd(o *options) *cobra.Command {
	ro := &redriveOptions{}
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send dead letters back where they came from",
		Long: `Send the dead letters of a dedup adapter back to where they came from: a
NATS JetStream stream, a RabbitMQ queue, a Kafka topic or a Redis stream (one
command each).

For each dead letter, in order: a letter that cannot come back is left in
place and reported as skipped (no Dedup-* headers nor x-death, a truncated
body, and unless --force the reasons no-key, invalid-key, undecodable and
key-reused, which a copy would only meet again); then the record of its key
decides: completed means a copy was handled, so the letter is removed and
nothing republished; processing under a live lease means a copy runs now, so
the letter is left for a later run; a failed record is forgotten. Then the
original body and headers (without the Dedup-* ones) are republished with
the broker's confirm, and only then is the letter removed.

A run stopped anywhere is safe to run again: a letter is never removed before
its copy was confirmed, and a letter whose copy went out but which was not
removed is answered by the record (the next run finds it completed and
removes the letter; a second copy meets the receiver's record as a
duplicate).

A store is needed (--redis or --postgres) to read and forget records, a dry
run included. Exit codes: 0 done, 1 an error or a letter the destination
refused, 2 usage, 3 the dead-letter destination does not exist, or nothing
matches --reason/--since.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageErrorf("redrive: name the broker: redrive nats, redrive rabbitmq, redrive kafka or redrive redisstream")
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringSliceVar(&ro.reasons, "reason", nil, "only dead letters of these reasons (attempts-exhausted, permanent-error, rejected...; repeat or comma-separate)")
	pf.StringVar(&ro.since, "since", "", "only dead letters dead-lettered at or after this `time`: RFC 3339 (2026-03-01T02:00:00Z) or a duration back from now (90m)")
	pf.IntVar(&ro.limit, "limit", 0, "stop after this many dead letters matching the filters (0: no limit)")
	pf.BoolVar(&ro.dryRun, "dry-run", false, "list what would be done and change nothing")
	pf.BoolVar(&ro.force, "force", false, "republish no-key, invalid-key, undecodable and key-reused dead letters too (never truncated ones)")
	pf.StringVar(&ro.keyFrom, "key-from", "", "derive the key of RabbitMQ's own dead letters (x-death, no Dedup-Key) as the receiver does: `FROM` is message-id, header:NAME or json:FIELD, in --namespace")
	cmd.AddCommand(ro.natsCmd(o), ro.rabbitMQCmd(o), ro.kafkaCmd(o), ro.redisStreamCmd(o))
	return cmd
}

func (ro *redriveOptions) natsCmd(o *options) *cobra.Command {
	var cfg redrive.NATSConfig
	cmd := &cobra.Command{
		Use:   "nats --stream DLQ_STREAM",
		Short: "Redrive the dead letters of a JetStream stream",
		Long: `Redrive the dead letters of a JetStream stream: each goes back to the subject
in its Dedup-Source header, into the stream of Dedup-Stream (the publish
expects it), with the original's Nats-Msg-Id and the Nats-* headers the
adapter moved aside put back (letters of dedupnats 0.1, whose headers are
Dedup-Subject, Dedup-Sequence and Dedup-Msg-Id, are read alike), and waits for the stream's PubAck; the letter
is then deleted from the dead-letter stream. Letters are read by sequence
(no consumer is created), from the first to the last the stream held when
the run began.

A copy the stream drops as a duplicate of the original (its Nats-Msg-Id is
still in the stream's duplicate window) is reported as skipped
(duplicate-window) and the letter left: run again once the window passed.`,
		Example: `  dedupctl redrive nats --nats nats://nats:4222 --stream ORDERS_DLQ --redis redis://redis:6379/0 --dry-run
  dedupctl redrive nats --stream ORDERS_DLQ --reason attempts-exhausted --since 2h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.URL == "" {
				return usageErrorf("no NATS server: give --nats URL ($%s)", EnvNATSURL)
			}
			if cfg.Stream == "" {
				return usageErrorf("no dead-letter stream: give --stream")
			}
			cfg.Timeout = o.timeout
			return ro.run(cmd.Context(), o, func(ctx context.Context) (redrive.Source, error) {
				return redrive.NewNATS(ctx, cfg)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "nats", os.Getenv(EnvNATSURL), "NATS server `URL`, nats://host:4222 ($"+EnvNATSURL+")")
	f.StringVar(&cfg.Stream, "stream", "", "the dead-letter `stream`")
	f.StringVar(&cfg.Subject, "subject", "", "only the stream's dead letters on this `subject` (wildcards allowed)")
	return cmd
}

func (ro *redriveOptions) rabbitMQCmd(o *options) *cobra.Command {
	var cfg redrive.RabbitMQConfig
	cmd := &cobra.Command{
		Use:   "rabbitmq --queue DLQ",
		Short: "Redrive the dead letters of a RabbitMQ queue",
		Long: `Redrive the dead letters of a RabbitMQ queue: each goes back to the queue named
by its Dedup-Source header (Dedup-Queue on a letter of dedup 0.1), through
the default exchange (an exchange the producer used might hand a copy to every
queue bound to it, and only this one dead-lettered it), published mandatory
with publisher confirms; the letter is then acknowledged.

Dead letters of the broker's own dead-lettering (the adapter's
DropPoison, a queue's x-dead-letter-exchange) carry only x-death: they
go to the queue it names, with Dedup-Original-Exchange and
Dedup-Original-Routing-Key set from it. They carry no key: give --key-from
(and --namespace) so that their records are read and forgotten like the
others'; without it they are republished without, and a record that reached
MaxAttempts dead-letters the copy again.

The letters are read with basic.get and held until the run ends, so that one
pass (a dry run too) reads each letter once, at most as many as the queue
held when it began; those left in place go back to the queue when it ends.`,
		Example: `  dedupctl redrive rabbitmq --amqp amqp://guest:guest@rabbitmq:5672/ --queue orders.dlq --redis redis://redis:6379/0 --dry-run
  dedupctl redrive rabbitmq --queue orders.dlq --key-from json:id --namespace orders`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.URL == "" {
				return usageErrorf("no RabbitMQ broker: give --amqp URL ($%s)", EnvAMQPURL)
			}
			if cfg.Queue == "" {
				return usageErrorf("no dead-letter queue: give --queue")
			}
			cfg.Timeout = o.timeout
			return ro.run(cmd.Context(), o, func(ctx context.Context) (redrive.Source, error) {
				return redrive.NewRabbitMQ(ctx, cfg)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "amqp", os.Getenv(EnvAMQPURL), "RabbitMQ broker `URL`, amqp://user:password@host:5672/vhost ($"+EnvAMQPURL+")")
	f.StringVar(&cfg.Queue, "queue", "", "the dead-letter `queue`")
	return cmd
}

// defaultGroup is the consumer group whose offsets record which Kafka
// dead letters were redriven.
const defaultGroup = "dedupctl-redrive"

func (ro *redriveOptions) kafkaCmd(o *options) *cobra.Command {
	var cfg redrive.KafkaConfig
	brokers := strings.Split(os.Getenv(EnvKafkaBroker), ",")
	if brokers[0] == "" {
		brokers = nil
	}
	cmd := &cobra.Command{
		Use:   "kafka --topic DLQ_TOPIC",
		Short: "Redrive the dead letters of a Kafka topic",
		Long: `Redrive the dead letters of a Kafka topic: each goes back to the topic and
partition named by its Dedup-Topic and Dedup-Partition headers, with its key,
value and headers and the original's Message-Id back, written with acks from
all in-sync replicas (acks=all).

A topic keeps its records: a letter is removed by committing the offset of the
tool's own consumer group (--group, never your consumers' group) past it. Each
partition is read from that offset to the end it had when the run began. The
offset only passes letters in order: a letter left in place (skipped, refused,
or not matching the filters) holds its partition's offset, and the letters
after it that were redriven are read again by the next run, which finds their
records completed and passes them. To look at passed letters again, give
another --group or reset this one's offsets.`,
		Example: `  dedupctl redrive kafka --brokers kafka-0:9092,kafka-1:9092 --topic orders.dlq --redis redis://redis:6379/0 --dry-run
  dedupctl redrive kafka --topic orders.dlq --reason attempts-exhausted --limit 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = brokers
			switch {
			case len(cfg.Brokers) == 0:
				return usageErrorf("no Kafka broker: give --brokers HOST:PORT,... ($%s)", EnvKafkaBroker)
			case cfg.Topic == "":
				return usageErrorf("no dead-letter topic: give --topic")
			case cfg.Group == "":
				return usageErrorf("--group: an empty group")
			}
			cfg.Timeout = o.timeout
			return ro.run(cmd.Context(), o, func(ctx context.Context) (redrive.Source, error) {
				return redrive.NewKafka(ctx, cfg)
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&brokers, "brokers", brokers, "Kafka bootstrap brokers, `HOST:PORT`,... ($"+EnvKafkaBroker+")")
	f.StringVar(&cfg.Topic, "topic", "", "the dead-letter `topic`")
	f.StringVar(&cfg.Group, "group", defaultGroup, "the tool's own consumer `group`, whose committed offsets say which dead letters are done")
	return cmd
}

// engineOptions checks the shared flags and turns them into the engine's.
func (ro *redriveOptions) engineOptions(o *options, now time.Time) (redrive.Options, error) {
	opts := redrive.Options{Reasons: ro.reasons, Limit: ro.limit, DryRun: ro.dryRun, Force: ro.force, Timeout: o.timeout}
	if ro.limit < 0 {
		return opts, usageErrorf("--limit %d: must not be negative", ro.limit)
	}
	if ro.since != "" {
		if d, err := time.ParseDuration(ro.since); err == nil && d > 0 {
			opts.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, ro.since); err == nil {
			opts.Since = t
		} else {
			return opts, usageErrorf("--since %q: want an RFC 3339 time (2026-03-01T02:00:00Z) or a positive duration (90m)", ro.since)
		}
	}
	if ro.keyFrom != "" {
		if o.namespace == "" {
			return opts, usageErrorf("--key-from needs the receivers' namespace: give --namespace ($%s)", EnvNamespace)
		}
		k, err := redrive.ParseKeyFrom(ro.keyFrom, o.namespace)
		if err != nil {
			return opts, usageErrorf("--%v", err)
		}
		opts.KeyFrom = k
	}
	return opts, nil
}

// redriveRow is a dead letter's line of --output json.
type redriveRow struct {
	ID        string     `json:"id"`
	MessageID string     `json:"message_id,omitempty"`
	Key       string     `json:"key"`
	Reason    string     `json:"reason"`
	To        string     `json:"to"`
	Time      *time.Time `json:"time,omitempty"`
	Action    string     `json:"action"`
	Why       string     `json:"why,omitempty"`
	Detail    string     `json:"detail,omitempty"`
}

// redriveSummary is the last line of --output json.
type redriveSummary struct {
	Summary struct {
		Read     int            `json:"read"`
		Filtered int            `json:"filtered"`
		Matched  int            `json:"matched"`
		Actions  map[string]int `json:"actions"`
		Skips    map[string]int `json:"skips"`
	} `json:"summary"`
}

// run opens the store and the source, redrives, and prints each letter
// and the summary.
func (ro *redriveOptions) run(ctx context.Context, o *options, open func(context.Context) (redrive.Source, error)) error {
	opts, err := ro.engineOptions(o, time.Now())
	if err != nil {
		return err
	}
	ins, where, closeStore, err := o.openStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	opts.Store, opts.StoreName = ins, where

	octx, cancel := context.WithTimeout(ctx, o.timeout)
	src, err := open(octx)
	cancel()
	if err != nil {
		if errors.Is(err, redrive.ErrNotFound) {
			return notFound(err)
		}
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
		_ = src.Close(cctx)
		cancel()
	}()

	p := o.newPrinter(o.streams.Out, "ID", "KEY", "REASON", "TO", "ACTION", "DETAIL")
	bar := o.newProgress(src.Size(), "redrive", "letters")
	opts.Progress = func() { bar.add(1) }
	sum, runErr := redrive.Run(ctx, src, opts, func(out redrive.Outcome) error {
		l := out.Letter
		row := redriveRow{ID: l.ID, MessageID: l.MessageID, Key: l.Key, Reason: l.Reason, To: l.To, Action: string(out.Action), Why: out.Why, Detail: out.Detail}
		if !l.Time.IsZero() {
			t := l.Time.UTC()
			row.Time = &t
		}
		action := string(out.Action)
		if out.Why != "" {
			action += ": " + out.Why
		}
		return p.row(row, orDash(l.ID), orDash(l.Key), orDash(l.Reason), orDash(l.To), action, orDash(out.Detail))
	})
	bar.done()
	if err := p.flush(); err != nil {
		return err
	}
	if err := ro.printSummary(o, p, sum); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		return runErr
	case sum.Actions[redrive.Failed] > 0:
		return fmt.Errorf("%d dead letters were refused by their destination and left in place", sum.Actions[redrive.Failed])
	case sum.Matched == 0 && (len(ro.reasons) > 0 || ro.since != ""):
		return notFound(fmt.Errorf("no dead letter matches %s (of %d read)", ro.filters(), sum.Read))
	}
	return nil
}

// filters says which filters were given.
func (ro *redriveOptions) filters() string {
	var f []string
	if len(ro.reasons) > 0 {
		f = append(f, "--reason "+strings.Join(ro.reasons, ","))
	}
	if ro.since != "" {
		f = append(f, "--since "+ro.since)
	}
	return strings.Join(f, " ")
}

// printSummary writes the summary: the last JSON line, or a sentence on
// stderr (as forget's), so that the table alone goes to stdout.
func (ro *redriveOptions) printSummary(o *options, p *printer, sum redrive.Summary) error {
	if o.jsonOutput() {
		var s redriveSummary
		s.Summary.Read, s.Summary.Filtered, s.Summary.Matched = sum.Read, sum.Filtered, sum.Matched
		s.Summary.Actions, s.Summary.Skips = map[string]int{}, sum.Skips
		for a, n := range sum.Actions {
			s.Summary.Actions[string(a)] = n
		}
		return p.row(s)
	}
	var parts []string
	for _, a := range []redrive.Action{redrive.Republished, redrive.WouldRepublish, redrive.RemovedCompleted,
		redrive.WouldRemoveCompleted, redrive.Skipped, redrive.Failed} {
		n := sum.Actions[a]
		if n == 0 {
			continue
		}
		part := fmt.Sprintf("%d %s", n, a)
		if a == redrive.Skipped {
			var whys []string
			for _, why := range slices.Sorted(maps.Keys(sum.Skips)) {
				whys = append(whys, fmt.Sprintf("%d %s", sum.Skips[why], why))
			}
			part += " (" + strings.Join(whys, ", ") + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing to do")
	}
	line := fmt.Sprintf("%d dead letters read, %d matched: %s", sum.Read, sum.Matched, strings.Join(parts, ", "))
	if ro.dryRun {
		line += "; dry run, nothing changed"
	}
	_, err := fmt.Fprintln(o.streams.Err, line)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
