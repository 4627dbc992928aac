package deduphttp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
)

// fingerprint is the SHA-256 of the request's method, path (as received),
// query (as received: parameters in another order are another request)
// and body, each preceded by its length so that no two requests share an
// input.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [3]string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(n[:], uint64(len(body)))
	h.Write(n[:])
	h.Write(body)
	var sum [sha256.Size]byte
	var out [43]byte // base64.RawURLEncoding.EncodedLen(sha256.Size)
	base64.RawURLEncoding.Encode(out[:], h.Sum(sum[:0]))
	return string(out[:])
}
