package dedupamqp

// For the tests: what the package keeps to itself.
const DefaultConcurrency = defaultConcurrency

var SplitOutboxDestination = splitOutboxDestination
