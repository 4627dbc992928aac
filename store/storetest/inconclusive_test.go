package storetest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedup-go/dedup/store"
)

// stubHarness returns a harness whose clock stands still at start: the
// cases below never call the store.
func stubHarness(start time.Time) func(t *testing.T) Harness {
	return func(t *testing.T) Harness {
		return Harness{
			Store:   struct{ store.Store }{},
			Advance: func(time.Duration) {},
			Tick:    time.Millisecond,
			Now:     func() time.Time { return start },
		}
	}
}

// tooLate is a case whose check fails after its deadline has passed while
// the Tick is shorter than enough: inconclusive, never failed.
func tooLate(start time.Time, enough time.Duration, ticks *[]time.Duration) testCase {
	return testCase{name: "too late", run: func(t *testing.T, f *fixture) {
		*ticks = append(*ticks, f.tick)
		f.expect(t, f.tick >= enough, start.Add(-time.Second), "the check ran past its deadline")
	}}
}

func TestRunCaseRetriesWithALongerTick(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ticks []time.Duration
	ok := t.Run("case", func(t *testing.T) {
		runCase(t, tooLate(start, 4*time.Millisecond, &ticks), stubHarness(start))
	})
	if !ok {
		t.Fatal("the case should pass on its second attempt")
	}
	if want := []time.Duration{time.Millisecond, 4 * time.Millisecond}; !slices.Equal(ticks, want) {
		t.Fatalf("the attempts ran with Ticks %v, want %v", ticks, want)
	}
}

func TestRunCaseInconclusiveSkips(t *testing.T) {
	t.Setenv("DEDUP_TEST_REQUIRE", "") // the skip is what is tested, whatever CI sets
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var (
		ticks   []time.Duration
		skipped bool
	)
	t.Run("case", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		runCase(t, tooLate(start, time.Hour, &ticks), stubHarness(start))
	})
	if !skipped {
		t.Fatal("a case inconclusive on every attempt should skip without DEDUP_TEST_REQUIRE=1")
	}
	if want := []time.Duration{time.Millisecond, 4 * time.Millisecond, 16 * time.Millisecond}; !slices.Equal(ticks, want) {
		t.Fatalf("the attempts ran with Ticks %v, want %v", ticks, want)
	}
}

// TestRunCaseInconclusiveFailsWhenRequired runs TestInconclusiveChild in a
// process of its own under DEDUP_TEST_REQUIRE=1: the case must fail there,
// since a failing test cannot be observed from inside the same process.
func TestRunCaseInconclusiveFailsWhenRequired(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestInconclusiveChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STORETEST_INCONCLUSIVE_CHILD=1", "DEDUP_TEST_REQUIRE=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child passed; it should fail under DEDUP_TEST_REQUIRE=1:\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestInconclusiveChild/case",
		"storetest: inconclusive 3 times, the last with a Tick of 16ms",
		"DEDUP_TEST_REQUIRE=1, so this fails instead of skipping",
	} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the child's output lacks %q:\n%s", want, out)
		}
	}
}

func TestInconclusiveChild(t *testing.T) {
	if os.Getenv("STORETEST_INCONCLUSIVE_CHILD") != "1" {
		t.Skip("run by TestRunCaseInconclusiveFailsWhenRequired")
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ticks []time.Duration
	t.Run("case", func(t *testing.T) {
		runCase(t, tooLate(start, time.Hour, &ticks), stubHarness(start))
	})
}
