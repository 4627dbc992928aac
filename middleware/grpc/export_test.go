package dedupgrpc

// Exported for the tests only.
var ValidateKey = validateKey

const MaxKeyLength = maxKeyLength
