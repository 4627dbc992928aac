package dedup

import (
	"fmt"
	"unicode/utf8"
)

// defaultMaxIDLength is the longest message id accepted by default, in bytes.
const defaultMaxIDLength = 512 // adapter.DefaultMaxIDLength

// KeyFunc derives a message's id. It returns an error matching ErrNoKey when
// the message carries none; package idstrategy has ready-made ones.
type KeyFunc[M any] func(M) (string, error)

// validateID checks that id is usable as a message id (adapter.ValidateID).
func validateID(id string, maxLen int) error {
	if err := validateLength(id, maxLen); err != nil {
		return err
	}
	return validateUTF8(id)
}

// validateLength is the part of validateID that costs nothing: id is
// neither empty nor longer than maxLen (defaultMaxIDLength when 0).
func validateLength(id string, maxLen int) error {
	if maxLen <= 0 {
		maxLen = defaultMaxIDLength
	}
	switch {
	case id == "":
		return fmt.Errorf("%w: the id is empty", ErrNoKey)
	case len(id) > maxLen:
		return fmt.Errorf("%w: the id is %d bytes, over the limit of %d (hash long ids with idstrategy.HashLong)", ErrInvalidKey, len(id), maxLen)
	}
	return nil
}

// validateUTF8 is the part of validateID that reads every byte of id.
func validateUTF8(id string) error {
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: the id is not valid UTF-8", ErrInvalidKey)
	}
	return nil
}
