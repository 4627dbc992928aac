module github.com/dedup-go/dedup/bench

go 1.26.0

require (
	github.com/IBM/sarama v1.43.3
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-amqp/v3 v3.1.0
	github.com/ThreeDotsLabs/watermill-kafka/v3 v3.0.6
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/franz v0.1.0
	github.com/dedup-go/dedup/adapters/kafka v0.1.0
	github.com/dedup-go/dedup/adapters/nats v0.1.0
	github.com/dedup-go/dedup/adapters/rabbitmq v0.1.0
	github.com/dedup-go/dedup/adapters/redisstream v0.1.0
	github.com/dedup-go/dedup/internal/redistest v0.1.0
	github.com/dedup-go/dedup/middleware/watermill v0.1.0
	github.com/dedup-go/dedup/store/mysqlstore v0.1.0
	github.com/dedup-go/dedup/store/pgoutbox v0.1.0
	github.com/dedup-go/dedup/store/pgstore v0.1.0
	github.com/dedup-go/dedup/store/redisstore v0.1.0
	github.com/dedup-go/dedup/store/rueidisstore v0.1.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats-server/v2 v2.15.2
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/segmentio/kafka-go v0.4.51
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	golang.org/x/sync v0.24.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/cenkalti/backoff/v3 v3.2.2 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/dedup-go/dedup/store/rediscore v0.1.0 // indirect
	github.com/dnwe/otelsarama v0.0.0-20240308230250-9388d9d40bc0 // indirect
	github.com/eapache/go-resiliency v1.7.0 // indirect
	github.com/eapache/go-xerial-snappy v0.0.0-20230731223053-c322873962e3 // indirect
	github.com/eapache/queue v1.1.0 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/snappy v0.0.4 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/hashicorp/go-uuid v1.0.3 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jcmturner/aescts/v2 v2.0.0 // indirect
	github.com/jcmturner/dnsutils/v2 v2.0.0 // indirect
	github.com/jcmturner/gofork v1.7.6 // indirect
	github.com/jcmturner/gokrb5/v8 v8.4.4 // indirect
	github.com/jcmturner/rpc/v2 v2.0.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/rcrowley/go-metrics v0.0.0-20201227073835-cf1acfcdf475 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/metric v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

// The benchmarks measure the code of this repository.

// The adapters are measured as they are in this repository.
replace (
	github.com/dedup-go/dedup => ../
	github.com/dedup-go/dedup/adapters/franz => ../adapters/franz
	github.com/dedup-go/dedup/adapters/kafka => ../adapters/kafka
	github.com/dedup-go/dedup/adapters/nats => ../adapters/nats
	github.com/dedup-go/dedup/adapters/rabbitmq => ../adapters/rabbitmq
	github.com/dedup-go/dedup/adapters/redisstream => ../adapters/redisstream
	github.com/dedup-go/dedup/internal/redistest => ../internal/redistest
	github.com/dedup-go/dedup/middleware/watermill => ../middleware/watermill
	github.com/dedup-go/dedup/store/rediscore => ../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../store/redisstore
	github.com/dedup-go/dedup/store/rueidisstore => ../store/rueidisstore
)

// The SQL stores and the outbox are measured as they are in this repository.
replace (
	github.com/dedup-go/dedup/store/mysqlstore => ../store/mysqlstore
	github.com/dedup-go/dedup/store/pgoutbox => ../store/pgoutbox
	github.com/dedup-go/dedup/store/pgstore => ../store/pgstore
)

// The Redis store on rueidis is measured beside redisstore as it is in
// this repository.

// github.com/twmb/franz-go is required at v1.22.2 for the Kafka row's
// in-process cluster (pkg/kfake): the version kfake's own go.mod asks for
// does not build with it.
