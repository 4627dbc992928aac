module github.com/dedup-go/dedup/adapters/franz

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/internal/redistest v0.1.0
	github.com/dedup-go/dedup/store/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dedup-go/dedup/store/rediscore v0.1.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The adapter is developed against the other modules of this repository;
// the replaces are ignored by users, who get the versions they require.
// redisstore and redistest serve the stall measurements alone
// (stalls_test.go): consumer processes share a store only through Redis.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)

// github.com/twmb/franz-go is required at v1.22.2, the version the tests'
// in-process cluster (pkg/kfake, at the pseudo-version adapters/kafka
// pins) builds with.
