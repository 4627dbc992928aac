package dedupnats

// ProcessCPU exposes processCPU to the benchmarks of package nats_test.
var ProcessCPU = processCPU
