package adapter

import (
	"fmt"
	"runtime/debug"

	"github.com/dedup-go/dedup"
)

// DecodeBody decodes m.Data into m.Body with dec, for adapters. An error, or
// a panic of dec, comes back matching dedup.ErrUndecodable: such a message is
// poison, and Decide dead-letters it.
func DecodeBody[T any](dec dedup.Decoder, m *dedup.Message[T]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %w", dedup.ErrUndecodable, m.Source, &dedup.PanicError{Func: "decoder", Value: p, Stack: debug.Stack()})
		}
	}()
	if err := dec.Unmarshal(m.Data, &m.Body); err != nil {
		return fmt.Errorf("%w: %s: %w", dedup.ErrUndecodable, m.Source, err)
	}
	return nil
}
