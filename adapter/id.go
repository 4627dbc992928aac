package adapter

import "github.com/dedup-go/dedup/internal/bridge"

// ValidateID checks that id is usable as a message id, as the receiver
// does: not empty, at most maxLen bytes (512 when maxLen <= 0) and valid
// UTF-8. The error matches dedup.ErrNoKey (empty) or dedup.ErrInvalidKey.
// An adapter that reads an id of its own (a reply's, a command's) checks
// it with the receiver's rule.
func ValidateID(id string, maxLen int) error { return bridge.ValidateID(id, maxLen) }

// DefaultMaxIDLength is the receiver's default Config.MaxIDLength: the
// longest message id it accepts, in bytes.
const DefaultMaxIDLength = 512
