package issuedkey

// Exported for the tests of package issuedkey_test.
const (
	MaxLength      = maxLength
	MaxKeyIDLength = maxKeyIDLength
)
