// dedup:test-only
//
// The tests of the outbox's relay on real brokers: JetStream (a shared
// server and one of the test's own, nats-server), RabbitMQ and Kafka
// (kfake), end to end included. A module of its own so that pgoutbox's
// go.mod, which its users' version selection reads, requires no broker
// client. Never released (tools/internal/repo: the marker above).
module github.com/dedup-go/dedup/store/pgoutbox/e2e

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/kafka v0.1.0
	github.com/dedup-go/dedup/adapters/nats v0.1.0
	github.com/dedup-go/dedup/adapters/rabbitmq v0.1.0
	github.com/dedup-go/dedup/store/pgoutbox v0.1.0
	github.com/dedup-go/dedup/store/pgstore v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats-server/v2 v2.15.2
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/segmentio/kafka-go v0.4.51
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.uber.org/goleak v1.3.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go v1.22.2 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace (
	github.com/dedup-go/dedup => ../../..
	github.com/dedup-go/dedup/adapters/kafka => ../../../adapters/kafka
	github.com/dedup-go/dedup/adapters/nats => ../../../adapters/nats
	github.com/dedup-go/dedup/adapters/rabbitmq => ../../../adapters/rabbitmq
	github.com/dedup-go/dedup/internal/redistest => ../../../internal/redistest
	github.com/dedup-go/dedup/store/pgoutbox => ..
	github.com/dedup-go/dedup/store/pgstore => ../../pgstore
	github.com/dedup-go/dedup/store/rediscore => ../../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../../store/redisstore
)
