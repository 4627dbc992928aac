package perf

import (
	"errors"
	"strings"
)

// The markers around the generated block of a markdown file. A line
// starting with BeginMarker opens the block (the rest of the line may say
// where it comes from); a line EndMarker closes it.
const (
	BeginMarker = "<!-- perf-table:begin"
	EndMarker   = "<!-- perf-table:end -->"
)

// Splice returns doc with the lines between its markers replaced by block.
func Splice(doc, block string) (string, error) {
	begin := strings.Index(doc, "\n"+BeginMarker)
	if begin < 0 {
		return "", errors.New("no line starting with " + BeginMarker)
	}
	open := begin + 1 + strings.Index(doc[begin+1:], "\n") + 1
	end := strings.Index(doc[open:], EndMarker+"\n")
	if end < 0 || (end > 0 && doc[open+end-1] != '\n') {
		return "", errors.New("no line " + EndMarker + " after " + BeginMarker)
	}
	if strings.Contains(doc[open+end+len(EndMarker):], "\n"+BeginMarker) {
		return "", errors.New("more than one " + BeginMarker)
	}
	return doc[:open] + block + doc[open+end:], nil
}
