module github.com/dedup-go/dedup/store/rediscore

go 1.26.0

require github.com/dedup-go/dedup v0.1.0

// The module is developed against the root module in this repository; the
// replace is ignored by users, who get the version they require.
replace github.com/dedup-go/dedup => ../..
