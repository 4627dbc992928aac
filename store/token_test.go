package store_test

import (
	"crypto/rand"
	"sync"
	"testing"

	"github.com/dedup-go/dedup/store"
)

// TestNewTokenDistinct draws tokens from several goroutines at once, as
// concurrent deliveries do: none is zero and no two are equal.
func TestNewTokenDistinct(t *testing.T) {
	const goroutines, each = 8, 20_000
	out := make([][]store.Token, goroutines)
	var wg sync.WaitGroup
	for g := range out {
		wg.Go(func() {
			tokens := make([]store.Token, each)
			for i := range tokens {
				tokens[i] = store.NewToken()
			}
			out[g] = tokens
		})
	}
	wg.Wait()
	seen := make(map[store.Token]bool, goroutines*each)
	for _, tokens := range out {
		for _, tok := range tokens {
			if tok.IsZero() {
				t.Fatal("NewToken returned the zero token")
			}
			if seen[tok] {
				t.Fatalf("NewToken returned %s twice in %d tokens", tok, len(seen))
			}
			seen[tok] = true
		}
	}
}

// TestNewTokenUsesEveryByte checks that every byte of a token is random:
// over 2,000 tokens each position takes most of its 256 values (about 254
// are expected; fewer than 200 would take a chance far below 2^-100).
func TestNewTokenUsesEveryByte(t *testing.T) {
	var values [len(store.Token{})]map[byte]bool
	for i := range values {
		values[i] = make(map[byte]bool)
	}
	for range 2_000 {
		tok := store.NewToken()
		for i, b := range tok {
			values[i][b] = true
		}
	}
	for i, v := range values {
		if len(v) < 200 {
			t.Errorf("byte %d of a token took %d distinct values in 2,000 tokens, want at least 200", i, len(v))
		}
	}
}

// BenchmarkNewToken compares NewToken with the crypto/rand read it
// replaced, in the same run, from one goroutine and from all of them:
//
//	go test -run '^$' -bench NewToken -count 6 ./store
func BenchmarkNewToken(b *testing.B) {
	cryptoToken := func() store.Token {
		var t store.Token
		_, _ = rand.Read(t[:])
		return t
	}
	for _, c := range []struct {
		name string
		fn   func() store.Token
	}{{"baseline=crypto-rand", cryptoToken}, {"NewToken", store.NewToken}} {
		b.Run(c.name, func(b *testing.B) {
			var last store.Token
			for b.Loop() {
				last = c.fn()
			}
			if last.IsZero() {
				b.Fatal("zero token")
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c.fn().IsZero() {
						b.Error("zero token")
						return
					}
				}
			})
		})
	}
}
