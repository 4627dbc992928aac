// Package cli is dedupctl's commands: the root command with the flags
// every command shares, and one file per command.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
)

// Exit codes of dedupctl.
const (
	ExitOK       = 0 // the command did what it was asked
	ExitError    = 1 // a store, broker or the command failed
	ExitUsage    = 2 // bad flags or arguments
	ExitNotFound = 3 // a key or dead letter asked for does not exist
)

// Environment variables that give the flags their defaults, so that a
// Kubernetes Job configures the tool without arguments.
const (
	EnvRedisURL    = "DEDUP_REDIS_URL"
	EnvRedisMode   = "DEDUP_REDIS_MODE"
	EnvPostgres    = "DEDUP_POSTGRES_DSN"
	EnvPrefix      = "DEDUP_PREFIX"
	EnvTable       = "DEDUP_TABLE"
	EnvNamespace   = "DEDUP_NAMESPACE"
	EnvOutput      = "DEDUP_OUTPUT"
	EnvTimeout     = "DEDUP_TIMEOUT"
	EnvNATSURL     = "DEDUP_NATS_URL"
	EnvAMQPURL     = "DEDUP_AMQP_URL"
	EnvKafkaBroker = "DEDUP_KAFKA_BROKERS"
)

// Streams are where a command reads and writes. Terminal says whether Err
// is a terminal: progress bars are drawn only then. Interactive says
// whether In is one: a confirmation is asked on In only then, and a
// command that needs one refuses to run without --yes otherwise (rather
// than wait on a pipe, or take a line of piped data for an answer).
type Streams struct {
	In          io.Reader
	Out, Err    io.Writer
	Terminal    bool
	Interactive bool
}

// options are the flags every command shares.
type options struct {
	redisURL  string
	redisMode string
	postgres  string
	prefix    string
	table     string
	namespace string
	output    string
	timeout   time.Duration
	streams   Streams
}

// jsonOutput reports whether the output is one JSON object per line.
func (o *options) jsonOutput() bool { return o.output == "json" }

// exitError carries the exit code of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// notFound wraps err as "not found": exit code 3.
func notFound(err error) error { return &exitError{code: ExitNotFound, err: err} }

// codeOf returns the exit code for err.
func codeOf(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// cobra's own argument errors.
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") || strings.Contains(msg, "arg(s)") {
		return ExitUsage
	}
	return ExitError
}

// Main runs dedupctl with args (without the program's name) and returns
// its exit code. Errors are printed on stderr.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	quietRedis()
	s := Streams{In: stdin, Out: stdout, Err: stderr}
	if f, ok := stderr.(*os.File); ok {
		s.Terminal = isatty.IsTerminal(f.Fd())
	}
	if f, ok := stdin.(*os.File); ok {
		s.Interactive = isatty.IsTerminal(f.Fd())
	}
	return Run(ctx, args, s)
}

// Run is Main with its streams given.
func Run(ctx context.Context, args []string, s Streams) int {
	root := newRoot(s)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(s.Err, "dedupctl:", err)
		if codeOf(err) == ExitUsage {
			fmt.Fprintln(s.Err, "Run 'dedupctl --help' for usage.")
		}
	}
	return codeOf(err)
}

// envDuration reads a duration from the environment: def when unset, and
// def with a usage error when unreadable, which the command reports unless
// the flag overrides the variable.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, usageErrorf("$%s %q: not a duration (10s, 1m30s)", name, v)
	}
	return d, nil
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func newRoot(s Streams) *cobra.Command {
	o := &options{streams: s}
	timeout, timeoutEnvErr := envDuration(EnvTimeout, 10*time.Second)
	root := &cobra.Command{
		Use:   "dedupctl",
		Short: "Inspect, forget and redrive dedup's records and dead letters",
		Long: `dedupctl reads the records of a dedup store (Redis or PostgreSQL),
forgets keys without pulling them from under a live holder, and sends dead
letters of a NATS JetStream stream, a RabbitMQ queue or a Kafka topic back to
where they came from.

Every flag of a store or broker has an environment variable (shown in its
help), so that a Kubernetes Job runs the tool without arguments.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if timeoutEnvErr != nil && !cmd.Flags().Changed("timeout") {
				return timeoutEnvErr
			}
			switch o.output {
			case "table", "json":
			default:
				return usageErrorf("--output %q: want table or json", o.output)
			}
			switch o.redisMode {
			case "auto", "single", "sentinel", "cluster":
			default:
				return usageErrorf("--redis-mode %q: want auto, single, sentinel or cluster", o.redisMode)
			}
			if o.timeout <= 0 {
				return usageErrorf("--timeout %v: must be positive", o.timeout)
			}
			if strings.Contains(o.namespace, ":") {
				return usageErrorf("--namespace %q: a namespace holds no ':'", o.namespace)
			}
			return nil
		},
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&o.redisURL, "redis", os.Getenv(EnvRedisURL),
		"Redis `URL` of the store: redis://host:6379/0; a Sentinel with ?master_name=NAME&addr=HOST:PORT...; a Cluster with ?addr=HOST:PORT... ($"+EnvRedisURL+")")
	pf.StringVar(&o.redisMode, "redis-mode", envOr(EnvRedisMode, "auto"),
		"how to read --redis: auto (master_name means a Sentinel, addr a Cluster; any other URL's server is asked what it is, and a Cluster node reads the whole Cluster), single, sentinel or cluster ($"+EnvRedisMode+")")
	pf.StringVar(&o.postgres, "postgres", os.Getenv(EnvPostgres),
		"PostgreSQL `DSN` of the store, postgres://user@host:5432/db ($"+EnvPostgres+")")
	pf.StringVar(&o.prefix, "prefix", envOr(EnvPrefix, "dedup:"), "Redis key prefix of the store's records ($"+EnvPrefix+")")
	pf.StringVar(&o.table, "table", envOr(EnvTable, "dedup_records"), "PostgreSQL table of the store's records ($"+EnvTable+")")
	pf.StringVar(&o.namespace, "namespace", os.Getenv(EnvNamespace), "the receivers' namespace: keys given without one are read in it; scan, stats and a bulk forget read only it ($"+EnvNamespace+")")
	pf.StringVarP(&o.output, "output", "o", envOr(EnvOutput, "table"), "output format: table or json (one object per line) ($"+EnvOutput+")")
	pf.DurationVar(&o.timeout, "timeout", timeout, "how long to wait for a store or broker to answer each call ($"+EnvTimeout+")")

	root.AddCommand(newGetCmd(o), newScanCmd(o), newStatsCmd(o), newForgetCmd(o), newRedriveCmd(o))
	usageExits(root)
	return root
}

// usageExits makes cobra's own help and completion commands exit 2 on a
// usage error, as every other command does: by default, "help NOSUCH"
// prints "Unknown help topic" and "completion" without its shell (or with
// an unknown one) prints its help, both exiting 0, so a script's typo
// would pass unnoticed.
func usageExits(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			show := c.Run
			c.Run = nil
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if target, _, err := root.Find(args); target == nil || err != nil {
					return usageErrorf("help: no command %q", strings.Join(args, " "))
				}
				show(cmd, args)
				return nil
			}
		case "completion":
			// Runnable, so that its NoArgs refuses an unknown shell
			// (exit 2) instead of printing its help.
			c.RunE = func(*cobra.Command, []string) error {
				return usageErrorf("completion: name the shell: completion bash, zsh, fish or powershell")
			}
		}
	}
}
