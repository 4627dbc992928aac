module github.com/dedup-go/dedup/internal/redistest

go 1.26.0

require (
	github.com/dedup-go/dedup v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// A test helper shared by the modules whose tests run Redis servers (the
// Redis stores, the adapters' outage tests, the middleware, dedupctl): a
// module of its own so that the core requires no Redis client. It is
// released with the others (their go.mod files require it for their
// tests), and promises nothing to users.
//
// The module is developed against the root module in this repository; the
// replace is ignored by users, who get the version they require.
replace github.com/dedup-go/dedup => ../..
