module github.com/dedup-go/dedup/middleware/watermill

go 1.26.0

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-amqp/v3 v3.1.0
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/store/redisstore v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cenkalti/backoff/v3 v3.2.2 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dedup-go/dedup/store/rediscore v0.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The middleware is developed against the other modules of this repository;
// the replaces are ignored by users, who get the versions they require.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)
