module github.com/dedup-go/dedup/store/mysqlstore

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dedup-go/dedup v0.1.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// The store is developed against the root module in this repository; the
// replace is ignored by users, who get the version they require.
replace github.com/dedup-go/dedup => ../..
