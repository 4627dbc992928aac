module github.com/dedup-go/dedup/examples/kafka

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/adapters/kafka v0.1.0
	github.com/segmentio/kafka-go v0.4.51
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go v1.22.2 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// The example is developed against the modules in this repository.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/adapters/kafka => ../../adapters/kafka
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)

// github.com/twmb/franz-go is required at v1.22.2 for the tests' in-process
// cluster (pkg/kfake): the version kfake's own go.mod asks for does not
// build with it.
