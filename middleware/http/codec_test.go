package deduphttp_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

var allow = []string{"Content-Type", "Location", "X-Custom"}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/a", "/b"},
		"Set-Cookie":   {"secret"},
		"X-Custom":     {""},
	}
	status, got, body, notKept, err := deduphttp.RoundTrip(allow, 201, h, []byte("body"), false)
	require.NoError(t, err)
	require.Equal(t, 201, status)
	require.False(t, notKept)
	require.Equal(t, map[string][]string{"Content-Type": {"application/json"}, "Location": {"/a", "/b"}, "X-Custom": {""}}, got)
	require.Equal(t, "body", string(body))

	status, got, body, notKept, err = deduphttp.RoundTrip(allow, 200, nil, []byte("dropped"), true)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.True(t, notKept)
	require.Empty(t, got)
	require.Empty(t, body)
}

// FuzzCodecDecode: stored bytes that are corrupt are an error, never a
// panic.
func FuzzCodecDecode(f *testing.F) {
	for _, body := range []string{"", "x"} {
		f.Add([]byte{1, 0, 201, 1, 1, 0, 0})
		f.Add(append([]byte{1, 0, 0xc8, 0x01, 1, 8}, "Location\x01\x02/a"+body...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		status, _, _, _, err := deduphttp.Decode(allow, data)
		if err == nil {
			require.True(t, status >= 100 && status <= 999)
		}
	})
}
