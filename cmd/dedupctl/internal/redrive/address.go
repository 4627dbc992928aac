package redrive

import (
	"net/url"
	"strings"
)

// redactURL hides the password of a URL (or of each of a comma-separated
// list of them), so that an error can name the address.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
