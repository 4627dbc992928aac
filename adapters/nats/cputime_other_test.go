//go:build !unix

package dedupnats

import "time"

// processCPU is unknown here: the benchmarks report zero CPU.
func processCPU() time.Duration { return 0 }
