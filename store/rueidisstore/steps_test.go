package rueidisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
)

// stepsSide is what TestStepsInterop needs of each store.
type stepsSide interface {
	store.Store
	store.StepStore
	store.Inspector
	StepsKey(key string) string
}

// TestStepsInterop: step records saved through one store are the other's
// (the same steps key, hash and meta field): it loads them, keeps them
// through its Extend and Release, returns them from Get and Scan, and
// deletes them with the record.
func TestStepsInterop(t *testing.T) {
	rs, us := interop(t)
	gc := redistest.Client(t)
	ctx := t.Context()
	sides := []struct {
		name string
		s    stepsSide
	}{{"redisstore", rs}, {"rueidisstore", us}}
	for i, first := range sides {
		other := sides[1-i]
		t.Run(first.name+" then "+other.name, func(t *testing.T) {
			key := "steps:" + first.name
			require.Equal(t, first.s.StepsKey(key), other.s.StepsKey(key), "one steps key")
			claim, err := first.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, first.s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: claim.Token, Name: "charge", Value: []byte("ch_1"), Retention: time.Hour}))

			steps, err := other.s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: claim.Token})
			require.NoError(t, err)
			require.Equal(t, []store.StepRecord{{Name: "charge", Value: []byte("ch_1")}}, steps)
			_, err = other.s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: store.NewToken()})
			require.ErrorIs(t, err, store.ErrLeaseLost)
			require.NoError(t, other.s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: claim.Token, Name: "reserve", Value: []byte("r_1"), Retention: time.Hour}))
			require.NoError(t, other.s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: time.Minute}))
			require.NoError(t, other.s.Release(ctx, store.ReleaseRequest{Key: key, Token: claim.Token, Error: "boom", Retention: time.Hour}))

			want := map[string]string{"charge": "ch_1", "reserve": "r_1"}
			for _, side := range sides {
				rec, err := side.s.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, want, stepMap(rec.Steps), "Get through %s", side.name)
				found := false
				for rec, err := range side.s.Scan(ctx, key) {
					require.NoError(t, err)
					require.Equal(t, want, stepMap(rec.Steps), "Scan through %s", side.name)
					found = true
				}
				require.True(t, found, "Scan through %s", side.name)
			}
			require.NoError(t, first.s.Delete(ctx, key))
			require.Zero(t, gc.Exists(ctx, first.s.StepsKey(key)).Val(), "Delete deletes the steps key")
			retry, err := other.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			steps, err = other.s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: retry.Token})
			require.NoError(t, err)
			require.Empty(t, steps, "deleted with the record")
		})
	}
}

func stepMap(recs []store.StepRecord) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		m[r.Name] = string(r.Value)
	}
	return m
}
