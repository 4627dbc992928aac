// Package dedupotel traces and measures dedup deliveries with
// OpenTelemetry: New returns an Observer for dedup.Config.Observer.
package dedupotel
