package dedupnats

import (
	"fmt"
	"strings"

	"github.com/dedup-go/dedup"
)

func wrapConfig(format string, args ...any) error {
	return fmt.Errorf("dedupnats: %w: %s", dedup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// validPublishSubject reports whether s is a subject a message can be
// published to: dot-separated non-empty tokens, without wildcards or
// whitespace.
func validPublishSubject(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// subjectMatches reports whether the literal subject matches pattern, which
// may hold the * and > wildcards.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
