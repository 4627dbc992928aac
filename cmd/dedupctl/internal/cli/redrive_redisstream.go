package cli

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
)

// EnvStreamRedisURL gives --stream-redis its default.
const EnvStreamRedisURL = "DEDUP_STREAM_REDIS_URL"

func (ro *redriveOptions) redisStreamCmd(o *options) *cobra.Command {
	var cfg redrive.RedisStreamConfig
	var streamURL string
	cmd := &cobra.Command{
		Use:   "redisstream --stream DLQ_STREAM",
		Short: "Redrive the dead letters of a Redis stream (dedupredisstream)",
		Long: `Redrive the dead letters of a dedupredisstream Consumer, a Redis stream of
their own (Options.DeadLetterStream): each is added back (XADD) to the stream
named by its Dedup-Stream field (Dedup-Source), with the original's fields,
its data and message id fields among them, and none of the Dedup-* ones;
the XADD's reply is the confirm, and the letter is then deleted (XDEL).
Letters are read by entry id (XRANGE, no consumer group), from the first to
the last the stream held when the run began.

The copy is a new entry (a new id) that the stream's consumer group reads as
new: the original's message id (Dedup-Original-Message-Id puts it back when
the letter lost its --id-field) is what makes a copy added twice (a run
stopped between the XADD and the XDEL, then run again) a duplicate to the
receiver. A stream that does not exist refuses the copy (XADD NOMKSTREAM):
the letter stays and the run exits 1.

The streams are on the Redis of --stream-redis, read like --redis (a Cluster
or a Sentinel too); without it, on the store's --redis.`,
		Example: `  dedupctl redrive redisstream --stream orders.dlq --redis redis://redis:6379/0 --dry-run
  dedupctl redrive redisstream --stream orders.dlq --stream-redis redis://streams:6379/0 --postgres postgres://dedup@pg/dedup --reason attempts-exhausted`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Stream == "":
				return usageErrorf("no dead-letter stream: give --stream")
			case streamURL == "" && o.redisURL == "":
				return usageErrorf("no Redis for the streams: give --stream-redis URL ($%s), or --redis when the store's Redis holds them", EnvStreamRedisURL)
			case cfg.DataField == cfg.IDField:
				return usageErrorf("--data-field and --id-field are both %q", cfg.DataField)
			}
			so := *o
			if streamURL != "" && streamURL != o.redisURL {
				so.redisURL, so.redisMode = streamURL, "auto"
			}
			return ro.run(cmd.Context(), o, func(ctx context.Context) (redrive.Source, error) {
				client, where, err := so.redisClient(ctx)
				if err != nil {
					return nil, err
				}
				cfg.Client, cfg.Where = client, where
				return redrive.NewRedisStream(ctx, cfg)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Stream, "stream", "", "the dead-letter `stream` (the Consumer's Options.DeadLetterStream)")
	f.StringVar(&streamURL, "stream-redis", os.Getenv(EnvStreamRedisURL), "Redis `URL` of the streams, read as --redis reads its own; defaults to --redis ($"+EnvStreamRedisURL+")")
	f.StringVar(&cfg.DataField, "data-field", "data", "the entries' body `field` (the Consumer's Options.DataField)")
	f.StringVar(&cfg.IDField, "id-field", "message-id", "the entries' message id `field` (the Consumer's Options.IDField)")
	return cmd
}
