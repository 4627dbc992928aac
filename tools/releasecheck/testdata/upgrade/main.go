// An upgrade user: written against v0.1.0, when store/redisstore was a
// package of the root module and middleware/grpc/gateway one of
// middleware/grpc, and built unchanged after the upgrade, when they are
// (or, for redisstore, are becoming) modules of their own. Every name it
// uses is in both APIs; the import names are explicit because 0.1.0's NATS
// package was called nats.
package main

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/middleware/grpc/gateway"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

var (
	_ = redisstore.New
	_ = pgstore.New
	_ = dedupnats.Horizon
	_ = gateway.ServeMuxOptions
)

func main() {
	cfg := dedup.Config{Namespace: "orders"}
	md, ok := gateway.HeaderMatcher("Idempotency-Key")
	opts := redisstore.Options{Prefix: "dedup:"}
	fmt.Println(cfg.Namespace, dedup.IsPermanent(dedup.Permanent(errors.New("bad input"))), md, ok, opts.Prefix)
}
