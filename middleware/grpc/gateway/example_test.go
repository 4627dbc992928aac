package gateway_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	dedupgateway "github.com/dedup-go/dedup/middleware/grpc/gateway"
	"github.com/dedup-go/dedup/store/memstore"
)

// An HTTP caller's Idempotency-Key goes through grpc-gateway to the gRPC
// server's interceptor: the retry is replayed, and the key sent with
// another body is 422.
func Example() {
	st, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	ic, err := dedupgrpc.New(st, &dedupgrpc.Options{
		Config: &dedup.Config{Namespace: "payments"},
		// Whose keys these are: from your authentication, in real life.
		Principal: func(ctx context.Context) (string, error) { return "tenant-1", nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary))
	srv.RegisterService(&echoDesc, &echo{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer wg.Wait()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	mux := runtime.NewServeMux(dedupgateway.ServeMuxOptions()...)
	// Generated code registers its routes (RegisterXHandler); echoRoute
	// stands in for it here.
	if err := mux.HandlePath(http.MethodPost, "/v1/echo", echoRoute(mux, conn)); err != nil {
		log.Fatal(err)
	}
	gw := httptest.NewServer(mux)
	defer gw.Close()

	for _, body := range []string{`"pay 10"`, `"pay 10"`, `"pay 20"`} {
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/v1/echo", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "c1d2e3")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		_ = resp.Body.Close()
		fmt.Printf("%d Idempotency-Replayed=%q\n", resp.StatusCode, resp.Header.Get("Idempotency-Replayed"))
	}
	// Output:
	// 200 Idempotency-Replayed=""
	// 200 Idempotency-Replayed="true"
	// 422 Idempotency-Replayed=""
}
