module github.com/dedup-go/dedup/adapters/redisstream

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/internal/redistest v0.1.0
	github.com/dedup-go/dedup/store/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dedup-go/dedup/store/rediscore v0.1.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The adapter is developed against the other modules of this repository;
// the replaces are ignored by users, who get the versions they require.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/internal/redistest => ../../internal/redistest
	github.com/dedup-go/dedup/store/rediscore => ../../store/rediscore
	github.com/dedup-go/dedup/store/redisstore => ../../store/redisstore
)
