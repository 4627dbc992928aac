module github.com/dedup-go/dedup/examples/tracing

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/kafka v0.1.0
	github.com/dedup-go/dedup/adapters/nats v0.1.0
	github.com/dedup-go/dedup/adapters/rabbitmq v0.1.0
	github.com/dedup-go/dedup/otel v0.1.0
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/segmentio/kafka-go v0.4.51
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go v1.22.2 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The example runs against the code in this repository.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/adapters/kafka => ../../adapters/kafka
	github.com/dedup-go/dedup/adapters/nats => ../../adapters/nats
	github.com/dedup-go/dedup/adapters/rabbitmq => ../../adapters/rabbitmq
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/otel => ../../otel
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)

// github.com/twmb/franz-go is required at v1.22.2 for the in-process Kafka
// cluster (pkg/kfake): the version kfake's own go.mod asks for does not
// build with it.
