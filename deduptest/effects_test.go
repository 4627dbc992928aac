package deduptest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/deduptest"
)

// ExactlyOnce, for effects a real broker's deliveries caused: each id
// once is fine; twice, never, and an id nobody expected are reported with
// Run's problem kinds, named, and fail the test given to Check.
func TestEffectsExactlyOnce(t *testing.T) {
	t.Parallel()
	var fx deduptest.Effects
	require.NoError(t, fx.ExactlyOnce().Err(), "nothing expected, nothing recorded")
	require.Contains(t, fx.ExactlyOnce("o-1").Err().Error(), "message o-1: no-effect")

	var wg sync.WaitGroup
	for _, id := range []string{"o-1", "o-2", "o-2", "poison", "o-1"} {
		wg.Go(func() { fx.Record(id) })
	}
	wg.Wait()
	fx.Record("o-3")
	require.Equal(t, 4, fx.Len())
	require.Equal(t, 2, fx.Count("o-2"))

	rep := fx.ExactlyOnce("o-1", "o-2", "o-3", "o-4", "o-3")
	require.Error(t, rep.Err())
	require.Len(t, rep.Messages, 4, "an id given twice counts once")
	require.Equal(t, 1, rep.Message("o-3").Effects)
	require.Equal(t, 0, rep.Message("o-4").Effects)
	got := map[deduptest.ProblemKind][]string{}
	for _, p := range rep.Problems {
		got[p.Kind] = append(got[p.Kind], p.ID)
	}
	require.Equal(t, map[deduptest.ProblemKind][]string{
		deduptest.DoubleEffect:     {"o-1", "o-2"},
		deduptest.NoEffect:         {"o-4"},
		deduptest.UnexpectedEffect: {"poison"},
	}, got)
	require.Equal(t, "message o-1: double-effect: the effect happened 2 times", rep.Problems[0].String())

	var ft fakeT
	require.False(t, rep.Check(&ft))
	require.Len(t, ft.msgs, len(rep.Problems)+1, "one error per problem, then the report")
	require.Contains(t, ft.msgs[2], "message o-4: no-effect: the effect never happened")
	require.Contains(t, ft.msgs[3], "message poison: unexpected-effect: the effect happened once, but")
	require.Contains(t, rep.String(), "effects of 4 messages expected once: 1 once, 2 more than once, 1 never; 1 unexpected\n")
	require.NotContains(t, rep.String(), "deliveries", "no deliveries to print")

	var clean deduptest.Effects
	clean.Record("a")
	ft = fakeT{}
	require.True(t, clean.ExactlyOnce("a").Check(&ft))
	require.Empty(t, ft.msgs)
	require.Equal(t, "effects of 1 messages expected once: 1 once, 0 more than once, 0 never; 0 unexpected\nok\n", clean.ExactlyOnce("a").String())
}

// The step counters: each step's effect and each compensation by message
// and name, read back, and checked by ExactlyOnce with the step problem
// kinds for every message that has some, expected or not.
func TestEffectsSteps(t *testing.T) {
	t.Parallel()
	var fx deduptest.Effects
	var wg sync.WaitGroup
	for _, name := range []string{"charge", "reserve", "notify"} {
		wg.Go(func() { fx.Step("o-1", name) })
	}
	wg.Wait()
	fx.Record("o-1")
	fx.Step("poison", "charge")
	fx.Compensation("poison", "charge") // given up: refunded once
	require.Equal(t, 1, fx.StepCount("o-1", "reserve"))
	require.Equal(t, 0, fx.StepCount("o-1", "refund"))
	require.Equal(t, 1, fx.CompensationCount("poison", "charge"))
	require.Equal(t, 0, fx.CompensationCount("o-9", "charge"))

	rep := fx.ExactlyOnce("o-1")
	require.NoError(t, rep.Err(), "a poison message's steps compensated once are fine")
	require.Equal(t, map[string]int{"charge": 1, "reserve": 1, "notify": 1}, rep.Message("o-1").Steps)
	require.Nil(t, rep.Message("o-1").Compensations)
	require.Equal(t, "effects of 1 messages expected once: 1 once, 0 more than once, 0 never; 0 unexpected\n"+
		"steps: 0 more than once, 0 compensations more than once, 0 compensations without their step\nok\n", rep.String())

	fx.Step("o-1", "charge")             // twice
	fx.Compensation("poison", "charge")  // twice
	fx.Compensation("poison", "reserve") // never reserved
	fx.Compensation("late", "charge")    // before its step...
	fx.Step("late", "charge")            // ...which ran after it
	rep = fx.ExactlyOnce("o-1")
	got := map[deduptest.ProblemKind][]string{}
	for _, p := range rep.Problems {
		got[p.Kind] = append(got[p.Kind], p.ID)
	}
	require.Equal(t, map[deduptest.ProblemKind][]string{
		deduptest.DoubleStep:              {"o-1"},
		deduptest.CompensationWithoutStep: {"late", "poison"},
		deduptest.DoubleCompensation:      {"poison"},
	}, got, "the expected ids' first, then the others' in order")
	require.Equal(t, `message o-1: double-step: the effect of step "charge" happened 2 times: an effect outside the step's function (or done twice inside it), `+
		`or a crash, a lost lease or a store failure between the effect and the step's record `+
		`(the window steps narrow, not close: an idempotency key from dedup.OutgoingID closes it)`, rep.Problems[0].String())
	require.Contains(t, rep.ProblemsOf(deduptest.CompensationWithoutStep)[0].Detail, `the compensation of step "charge" ran before the step's effect happened`)
	require.Contains(t, rep.ProblemsOf(deduptest.CompensationWithoutStep)[1].Detail, `the compensation of step "reserve" ran (once), but the step's effect never happened`)
	require.Contains(t, rep.ProblemsOf(deduptest.DoubleCompensation)[0].Detail, `the compensation of step "charge" ran 2 times`)
	require.Contains(t, rep.String(), "steps: 1 more than once, 1 compensations more than once, 2 compensations without their step\n")
}
