module github.com/dedup-go/dedup/cmd/dedupctl

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/franz v0.1.0
	github.com/dedup-go/dedup/adapters/kafka v0.1.0
	github.com/dedup-go/dedup/adapters/nats v0.1.0
	github.com/dedup-go/dedup/adapters/rabbitmq v0.1.0
	github.com/dedup-go/dedup/adapters/redisstream v0.1.0
	github.com/dedup-go/dedup/internal/redistest v0.1.0
	github.com/dedup-go/dedup/middleware/grpc v0.1.0
	github.com/dedup-go/dedup/middleware/http v0.1.0
	github.com/dedup-go/dedup/store/pgstore v0.1.0
	github.com/dedup-go/dedup/store/redisstore v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/mattn/go-isatty v0.0.24
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/segmentio/kafka-go v0.4.51
	github.com/spf13/cobra v1.10.2
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dedup-go/dedup/store/rediscore v0.1.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261005182115-fad411399dd8 // indirect
)

// The tool is developed against the modules of this repository through
// these replaces. go install PATH@VERSION refuses a go.mod that has any, so
// a release tags this module on a commit of its own whose go.mod is this
// one without them (scripts/release.sh; docs/architecture.md, Layout).
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/adapters/franz => ../../adapters/franz
	github.com/dedup-go/dedup/adapters/kafka => ../../adapters/kafka
	github.com/dedup-go/dedup/adapters/nats => ../../adapters/nats
	github.com/dedup-go/dedup/adapters/rabbitmq => ../../adapters/rabbitmq
	github.com/dedup-go/dedup/adapters/redisstream => ../../adapters/redisstream
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/middleware/grpc => ../../middleware/grpc
	github.com/dedup-go/dedup/middleware/http => ../../middleware/http
	github.com/dedup-go/dedup/store/pgstore => ../../store/pgstore
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)

// github.com/twmb/franz-go is required at v1.22.2 for the tests' in-process
// Kafka cluster (pkg/kfake): the version kfake's own go.mod asks for does not
// build with it.
//
// github.com/dedup-go/dedup/adapters/franz is required for the tests alone,
// which redrive the dead letters its Consumer writes: the tool reads them
// with kafka-go, and does not import it.
//
// github.com/dedup-go/dedup/middleware/grpc (and with it gRPC and protobuf)
// is required for the tests alone, which hold the tool's copy of its record
// ids to its own: the tool does not import it.
