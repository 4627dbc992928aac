package issuedkey_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
)

func ExampleIssuer() {
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)) // clock.Real() in a service
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{
		Keys:  []issuedkey.Key{{ID: "2026-11", Secret: bytes.Repeat([]byte("s"), 32)}}, // a real secret is random
		TTL:   time.Hour,
		Clock: clk,
	})
	if err != nil {
		log.Fatal(err)
	}
	k, err := iss.Issue("tenant-42", "POST /orders/o-1/pay")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("expires:", k.ExpiresAt.Format(time.RFC3339))
	fmt.Println("valid:", iss.Verify(k.Key, "tenant-42", "POST /orders/o-1/pay") == nil)
	fmt.Println("another tenant:", errors.Is(iss.Verify(k.Key, "tenant-7", "POST /orders/o-1/pay"), issuedkey.ErrWrongPrincipal))
	fmt.Println("another order:", errors.Is(iss.Verify(k.Key, "tenant-42", "POST /orders/o-2/pay"), issuedkey.ErrWrongOperation))
	fmt.Println("made up:", errors.Is(iss.Verify("v1.2026-11.guess", "tenant-42", "POST /orders/o-1/pay"), issuedkey.ErrNotIssued))
	clk.Advance(time.Hour)
	fmt.Println("an hour later:", errors.Is(iss.Verify(k.Key, "tenant-42", "POST /orders/o-1/pay"), issuedkey.ErrExpired))
	// Output:
	// expires: 2026-11-22T13:00:00Z
	// valid: true
	// another tenant: true
	// another order: true
	// made up: true
	// an hour later: true
}
