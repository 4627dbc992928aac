module github.com/dedup-go/dedup/adapters/franz

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// The adapter is developed against the root module in this repository; the
// replace is ignored by users, who get the version they require.
replace github.com/dedup-go/dedup => ../..

// github.com/twmb/franz-go is required at v1.22.2, the version the tests'
// in-process cluster (pkg/kfake, at the pseudo-version adapters/kafka
// pins) builds with.
