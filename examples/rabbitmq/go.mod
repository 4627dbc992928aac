module github.com/dedup-go/dedup/examples/rabbitmq

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/rabbitmq v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

// The example runs against the code in this repository.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/adapters/rabbitmq => ../../adapters/rabbitmq
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)
