package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// confirm asks question on stderr and reads the answer from stdin: true
// for y or yes. The caller checks Streams.Interactive first; an answer
// that never comes (stdin closed) is a no.
func (o *options) confirm(question string) (bool, error) {
	fmt.Fprintf(o.streams.Err, "%s [y/N] ", question)
	line, err := bufio.NewReader(o.streams.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
