package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo plays the scripted client on memstore and on the real Redis,
// and checks its report: the order created once despite the retry, the
// payment charged once despite the gateway failure and the retries, the
// refused keys with their statuses, the concurrent retries answered with
// one charge.
func TestDemo(t *testing.T) {
	for name, addr := range map[string]func(t *testing.T) string{
		"memstore": func(*testing.T) string { return "" },
		"redis":    func(t *testing.T) string { return testenv.Redis.Addr(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			require.NoError(t, demo(ctx, addr(t), &out))
			report := out.String()
			t.Log("\n" + report)
			require.Regexp(t, `(?m)^   first:  201 \{"id":"o-1",.*\n   retry:  201 \(replayed\) \{"id":"o-1",`, report)
			require.Regexp(t, `(?m)^   same key from globex \(another tenant\): 201 \{"id":"o-2","tenant":"globex"`, report)
			require.Regexp(t, `(?m)^   no key: 400 .*"code":"idempotency-key-missing"`, report)
			require.Regexp(t, `(?m)^   pay:    503 payment gateway unavailable\n   retry:  201 \{"order_id":"o-1","charge_id":"(ch_\d+)".*\n   retry:  201 \(replayed\) \{"order_id":"o-1"`, report)
			require.Regexp(t, `(?m)^   globex with acme's key:   403 .*idempotency-key-principal`, report)
			require.Regexp(t, `(?m)^   a key made up by the app: 400 .*idempotency-key-not-issued`, report)
			require.Regexp(t, `(?m)^   the key with another body: 422 .*idempotency-key-reused`, report)
			require.Regexp(t, `(?m)^   answers: (201 \(replayed\) x\d+, )?201 x1(, 409 x\d+)?$`, report)
			require.Regexp(t, regexp.MustCompile(`(?m)^o-1 charged 1 time\(s\): \[ch_\d+\]$`), report)
			require.Regexp(t, `(?m)^o-3 charged 1 time\(s\): \[ch_\d+\]$`, report)
			require.Contains(t, report, "Orders created: 3")
			require.Contains(t, report, "Every order created once and charged once: true")
		})
	}
}
