package perf

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Aims is every row's aim, keyed by the row's name: the one place they are
// written. BenchmarkTable prints them beside its figures, perftable puts
// them into docs/performance.md, and TestAims fails when a row has none
// or an aim names no row. The aims of issue 44 ("speed, third round")
// replaced those of issue 27 for the rows it names; the others kept theirs.
var Aims = map[string]Aim{
	// In process.
	"duplicate answered in process, memstore, empty result": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.25}},
	},
	`duplicate answered in process, memstore, small JSON result ({"order":42,"status":"captured"})`: {},
	"new message, memstore, through Handle": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.5}},
	},
	"new message, memstore, through Handle, 1 goroutine (100k records)": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.5}},
	},
	"new message, memstore, through Handle, 4 goroutines (100k records)": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.5}},
	},
	"new message, memstore, through Handle, 16 goroutines (100k records)": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.5}},
	},
	"new message, memstore, through Handle, 64 goroutines (100k records)": {
		Goals: []Goal{{Side: "^dedup Handle$", Of: Ratio, Cmp: AtMost, Limit: 1.5}},
	},

	// Recorded steps (issue 46): a retry whose steps all completed before
	// reads their records once, whatever their number: on Redis one round
	// trip beside the retry's own three (the refused claim, the takeover,
	// the completion): 4/3 of a retry without steps, and the steps' own
	// decoding.
	"a handler of 3 steps, memstore": {},
	"a handler of 3 steps, Redis (redisstore), sequential": {
		Goals: []Goal{{Side: "^3 steps completed before over no steps, a retry$", Of: Ratio, Cmp: AtMost, Limit: 1.6}},
	},

	// Brokers over memstore: the ceiling is what memstore's own work
	// leaves of the bare consumer's rate.
	"JetStream consumer, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupnats Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.85}},
		Ceiling: true,
	},
	"RabbitMQ consumer, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupamqp Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
		Ceiling: true,
	},
	"Kafka consumer (kfake, 3 partitions), commit after every message, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupkafka Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
		Ceiling: true,
	},
	"Kafka consumer (kfake, 3 partitions), commit every 100ms, memstore, trivial handler": {
		Ceiling: true,
	},
	"Kafka consumer on franz-go (kfake, 3 partitions), commit after every message, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupfranz Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
		Ceiling: true,
	},
	"Kafka consumer on franz-go (kfake, 3 partitions), commit every 100ms, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupfranz Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
		Ceiling: true,
	},
	"Redis Streams consumer, memstore, trivial handler": {
		Goals:   []Goal{{Side: "^dedupredisstream Consumer", Of: Ratio, Cmp: AtLeast, Limit: 0.85}},
		Note:    "both to the last XACK",
		Ceiling: true,
	},
	"Redis Streams consumer, redisstore on the same Redis": {
		Note: "dedup beside the ceiling: the bare loop plus the store's own commands",
	},
	"Watermill router over watermill-amqp/v3, 256-byte messages, trivial handler": {
		Goals: []Goal{{Side: "^router \\+ dedupwatermill", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
	},
	"Watermill duplicate answered in process by the handler middleware, memstore, nothing produced": {
		Goals: []Goal{{Side: "^dedupwatermill Middleware$", Of: Ratio, Cmp: Below, Limit: 1}},
		Note:  "and fewer allocs than Watermill's Deduplicator",
	},

	// Redis.
	"new message on Redis, sequential": {
		Goals: []Goal{{Side: "^dedup Handle", Of: Ratio, Cmp: AtMost, Limit: 2.3}},
	},
	"new messages on Redis, 16 goroutines": {
		Goals: []Goal{{Side: "^dedup Handle", Of: Ratio, Cmp: AtLeast, Limit: 0.90}},
	},
	"HandleBatch(100) on Redis": {
		Goals: []Goal{{Side: "^dedup HandleBatch", Of: Ratio, Cmp: AtLeast, Limit: 0.70}},
	},
	"Redis command time per new message": {
		Goals: []Goal{{Side: "^dedup:", Of: Value, Cmp: AtMost, Limit: 10, Unit: "µs"}},
	},
	"Redis command time per new message, 16 goroutines": {
		Goals: []Goal{{Side: "^dedup:", Of: Value, Cmp: AtMost, Limit: 10, Unit: "µs"}},
	},
	"Redis CPU per new message (server user + sys)":                {},
	"Redis CPU per new message (server user + sys), 16 goroutines": {},
	"redisstore MEMORY USAGE per completed record": {
		Goals: []Goal{{Side: "^redisstore", Of: Value, Cmp: AtMost, Limit: 130, Unit: "B"}},
	},
	"new message on Redis with a replica, sequential": {
		Note: "MinReplicas: the cost of two WAITs (claim, completion)",
	},
	"new messages on Redis with a replica, 16 goroutines": {
		Note: "MinReplicas: the cost of two WAITs (claim, completion)",
	},

	// SQL stores.
	"new message in the handler's transaction, MariaDB 10.11 (mysqlstore)": {
		Goals: []Goal{
			{Side: "TxHandler", Of: Ratio, Cmp: AtMost, Limit: 3},
			{Side: "^a duplicate", Of: Ratio, Cmp: Below, Limit: 1},
		},
	},
	"new message in the handler's transaction, PostgreSQL (pgstore)": {
		Goals: []Goal{
			{Side: "TxHandler", Of: Ratio, Cmp: AtMost, Limit: 3},
			{Side: "^a duplicate", Of: Ratio, Cmp: Below, Limit: 1},
		},
	},

	// The outbox relay: reported, not worked on in issue 44.
	"outbox relay to JetStream (PostgreSQL outbox, 1 relay)": {
		Goals: []Goal{{Side: "^pgoutbox relay, Buckets 64, BatchSize 4096$", Of: Ratio, Cmp: AtLeast, Limit: 0.7}},
	},
	"outbox relay to Kafka (kfake, 3 partitions; PostgreSQL outbox, 1 relay)": {
		Goals: []Goal{{Side: "^pgoutbox relay, Buckets 64, BatchSize 4096$", Of: Ratio, Cmp: AtLeast, Limit: 0.7}},
	},
	"outbox relay to RabbitMQ (PostgreSQL outbox, 1 relay)": {
		Goals: []Goal{{Side: "^pgoutbox relay, Buckets 64, BatchSize 4096$", Of: Ratio, Cmp: AtLeast, Limit: 0.7}},
	},
	"outbox relay to Kafka on franz-go (kfake, 3 partitions; PostgreSQL outbox, 1 relay)": {
		Goals: []Goal{{Side: "^pgoutbox relay, .*dedupfranz", Of: Ratio, Cmp: AtLeast, Limit: 0.7}},
		Note:  "beside the kafka-go relay",
	},
}

// An Aim is what a row should show: goals a run is checked against, and
// words for what they leave out. No goals and no note is "none set".
type Aim struct {
	Goals []Goal
	// Note is said after the goals.
	Note string
	// Ceiling makes BenchmarkTable measure, each round, memstore's own
	// Acquire + Complete for the row's number of messages, and report the
	// ceiling that work implies for a consumer over memstore: the bare
	// side's time per message over itself plus the store's.
	Ceiling bool
}

// A Goal is one comparison a line of a row must pass.
type Goal struct {
	// Side is a regular expression matching the names of the lines (sides
	// or "A over B" lines) the goal applies to; each must pass it.
	Side string
	Of   Measure
	Cmp  Cmp
	// Limit is what the measure is compared with: a ratio, or for Value
	// and Allocs a figure in Unit.
	Limit float64
	// Unit is the row's unit for Value goals ("allocs" for Allocs goals),
	// checked against the run's, so that a limit never meets a figure of
	// another unit.
	Unit string
}

// Measure is what of a line a goal compares.
type Measure int

const (
	// Ratio is the line's ratio: to the row's baseline, or of an "A over
	// B" line.
	Ratio Measure = iota
	// Value is the line's median in the row's unit.
	Value
	// Allocs is the line's median allocations per operation.
	Allocs
)

// Cmp is how a goal compares.
type Cmp string

const (
	AtLeast Cmp = ">="
	AtMost  Cmp = "<="
	Below   Cmp = "<"
)

// Met reports whether v passes the goal.
func (g Goal) Met(v float64) bool {
	switch g.Cmp {
	case AtLeast:
		return v >= g.Limit
	case AtMost:
		return v <= g.Limit
	case Below:
		return v < g.Limit
	}
	return false
}

// Matches reports whether the goal applies to the line named name.
func (g Goal) Matches(name string) bool {
	return regexp.MustCompile(g.Side).MatchString(name)
}

// who is the goal's side in words: its expression without anchors and
// escapes.
func (g Goal) who() string {
	s := strings.TrimSuffix(strings.TrimPrefix(g.Side, "^"), "$")
	s = strings.ReplaceAll(s, ".*", " … ")
	s = strings.ReplaceAll(s, `\`, "")
	return strings.Join(strings.Fields(s), " ")
}

func (g Goal) String() string {
	limit := strconv.FormatFloat(g.Limit, 'f', -1, 64)
	switch g.Of {
	case Value:
		return fmt.Sprintf("%s %s %s %s", g.who(), g.Cmp, limit, g.Unit)
	case Allocs:
		return fmt.Sprintf("%s %s %s allocs/op", g.who(), g.Cmp, limit)
	}
	return fmt.Sprintf("%s: ratio %s %s", g.who(), g.Cmp, limit)
}

func (a Aim) String() string {
	var parts []string
	for _, g := range a.Goals {
		parts = append(parts, g.String())
	}
	if a.Note != "" {
		parts = append(parts, a.Note)
	}
	if len(parts) == 0 {
		return "none set"
	}
	return strings.Join(parts, "; ")
}

// Validate reports an aim whose goals cannot be checked.
func (a Aim) Validate() error {
	for _, g := range a.Goals {
		if _, err := regexp.Compile(g.Side); err != nil {
			return fmt.Errorf("goal %q: %w", g.Side, err)
		}
		switch g.Cmp {
		case AtLeast, AtMost, Below:
		default:
			return fmt.Errorf("goal %q: comparison %q", g.Side, g.Cmp)
		}
		if (g.Of == Value || g.Of == Allocs) == (g.Unit == "") {
			return fmt.Errorf("goal %q: a Value or Allocs goal has a unit, a Ratio goal none", g.Side)
		}
	}
	return nil
}
