module github.com/dedup-go/dedup/store/pgoutbox

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/dedup-go/dedup/store/pgstore v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

// The outbox is developed against the modules of this repository; the
// replaces are ignored by users, who get the versions they require. The
// tests of the relay on real brokers are the test-only module of e2e/, so
// that no broker client is required here.
replace (
	github.com/dedup-go/dedup => ../..
	github.com/dedup-go/dedup/store/pgstore => ../pgstore
)
