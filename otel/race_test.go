//go:build race

package dedupotel_test

const raceEnabled = true
