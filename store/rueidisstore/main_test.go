package rueidisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package on a goroutine left running, but one of
// rueidis's own: a client refreshing its view of a server that failed
// (the fault tests kill theirs) sleeps out a delay of up to a second in
// a goroutine that Close does not stop (singleflight's DelayDo), and ends
// by itself. The store starts no goroutine of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}
