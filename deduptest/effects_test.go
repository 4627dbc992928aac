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
