package redrive

import "strings"

// hasPrefixFold reports whether the header name s starts with prefix,
// whatever the case: NATS and Kafka header names are case-sensitive, and
// a producer may spell Dedup-* otherwise than the adapters.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
