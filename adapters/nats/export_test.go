package dedupnats

// ProcessCPU exposes processCPU to the benchmarks of package nats_test.
var ProcessCPU = processCPU

// The defaults and headers the tests of package dedupnats_test compare with.
const (
	DefaultConcurrency = defaultConcurrency
	DefaultPrefetch    = defaultPrefetch
	HeaderOriginalSize = headerOriginalSize
)
