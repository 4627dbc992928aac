package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/storetest"
)

// healthy is the ReplicaTimeout of the tests' stores whose writes must be
// acknowledged: on this busy shared machine a replica has been seen to
// take over the default 200ms to acknowledge.
const healthy = time.Second

// replicated starts a master and a replica of the test's own and returns
// a client of the master, the replica, and a store with MinReplicas 1.
func replicated(t *testing.T) (*redis.Client, *redistest.Server, *redisstore.Store) {
	t.Helper()
	master := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.StartReplica(t, master)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c, replica, newStore(t, c, &redisstore.Options{MinReplicas: 1, ReplicaTimeout: healthy})
}

// requireNotReplicated checks that err is a shortfall of replicas: the
// store unavailable for the call, naming what was acknowledged and wanted.
func requireNotReplicated(t *testing.T, err error, msg ...any) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrUnavailable, msg...)
	require.ErrorIs(t, err, redisstore.ErrNotReplicated, msg...)
	require.ErrorContains(t, err, "0 of the 1 wanted", msg...)
}

// TestMinReplicasRefusesUnreplicatedWrites: with the replica stopped
// (SIGSTOP: it cannot acknowledge), every write the promise rests on is
// refused as unavailable, single and batched: a claim (given back: the key
// is free again, or a takeover's record as it was, attempt count
// included), an extension, a step record, a completion, a release. A
// duplicate's answer, which writes nothing, is not refused. Once the
// replica is back, a completion refused before succeeds when tried again,
// though it finds the record completed by its own token (its write is
// confirmed anew), and an Acquire refused before, tried again with its own
// token, claims the key as it first would have: a claim given back is not
// the token's to be granted again with the attempt count of the claim
// before it.
func TestMinReplicasRefusesUnreplicatedWrites(t *testing.T) {
	t.Parallel()
	c, replica, ok := replicated(t)
	// The calls the stopped replica refuses go through a store that waits
	// for it the default 200ms; the others through ok.
	s := newStore(t, c, &redisstore.Options{Prefix: ok.Prefix(), MinReplicas: 1})
	ctx := t.Context()
	const lease, retention = time.Minute, time.Minute
	acquire := func(key string) store.Claim {
		t.Helper()
		claim, err := ok.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
		require.NoError(t, err)
		return claim
	}
	held := acquire("held")
	require.True(t, held.Acquired)
	done := acquire("done")
	require.NoError(t, ok.Complete(ctx, store.CompleteRequest{Key: "done", Token: done.Token, Result: []byte("r"), Retention: retention}))
	failed := acquire("failed")
	require.NoError(t, ok.Release(ctx, store.ReleaseRequest{Key: "failed", Token: failed.Token, Error: "boom", Retention: retention}))
	batch := ok.AcquireBatch(ctx, []store.AcquireRequest{{Key: "b1", Lease: lease}, {Key: "b2", Lease: lease}})
	for _, o := range batch {
		require.NoError(t, o.Err)
	}

	replica.Pause()
	t.Cleanup(replica.Resume)

	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "new", Lease: lease})
	requireNotReplicated(t, err)
	require.ErrorContains(t, err, "the claim was given back")
	_, err = s.Get(ctx, "new")
	require.ErrorIs(t, err, store.ErrNotFound, "a first claim given back is deleted")

	own := store.NewToken() // the caller's, kept for the retry below
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease, Token: own})
	requireNotReplicated(t, err)
	rec, err := s.Get(ctx, "failed")
	require.NoError(t, err)
	require.Equal(t, store.StateProcessing, rec.State, "a takeover given back")
	require.Equal(t, 1, rec.Attempt, "a takeover given back counts no attempt")
	require.Equal(t, "boom", rec.LastError)
	require.False(t, rec.LeaseUntil.After(time.Now()), "a takeover given back has its lease ended")

	dup, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: lease})
	require.NoError(t, err, "a duplicate's answer writes nothing and is not refused")
	require.Equal(t, "r", string(dup.Record.Result))

	requireNotReplicated(t, s.Extend(ctx, store.ExtendRequest{Key: "held", Token: held.Token, Lease: lease}))
	requireNotReplicated(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "held", Token: held.Token, Name: "charge", Value: []byte("c"), Retention: retention}))
	requireNotReplicated(t, s.Complete(ctx, store.CompleteRequest{Key: "held", Token: held.Token, Result: []byte("h"), Retention: retention}))
	requireNotReplicated(t, s.Complete(ctx, store.CompleteRequest{Key: "held", Token: held.Token, Result: []byte("h"), Retention: retention}),
		"a completion tried again finds its own record completed, and is not confirmed while the replica is away")
	requireNotReplicated(t, s.Release(ctx, store.ReleaseRequest{Key: "b2", Token: batch[1].Claim.Token, Error: "x", Retention: retention}))

	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "n1", Lease: lease}, {Key: "done", Lease: lease}, {Key: "n2", Lease: lease}})
	requireNotReplicated(t, out[0].Err)
	require.NoError(t, out[1].Err, "a duplicate in a batch")
	requireNotReplicated(t, out[2].Err)
	for _, err := range s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "b1", Token: batch[0].Claim.Token, Lease: lease}}) {
		requireNotReplicated(t, err)
	}
	for range 2 { // the second finds its own record completed
		for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "b1", Token: batch[0].Claim.Token, Result: []byte("b"), Retention: retention}}) {
			requireNotReplicated(t, err)
		}
	}

	replica.Resume()
	redistest.WaitLinkUp(t, replica.Addr(), 30*time.Second)
	c2, err := ok.CompleteReport(ctx, store.CompleteRequest{Key: "held", Token: held.Token, Result: []byte("h"), Retention: retention})
	require.NoError(t, err, "the completion refused before, tried again")
	require.Equal(t, store.CompletionUnchanged, c2, "it found its own completion")
	for _, o := range ok.CompleteBatchReport(ctx, []store.CompleteRequest{{Key: "b1", Token: batch[0].Claim.Token, Result: []byte("b"), Retention: retention}}) {
		require.NoError(t, o.Err)
		require.Equal(t, store.CompletionUnchanged, o.Completion)
	}
	retry, err := ok.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease, Token: own})
	require.NoError(t, err)
	require.True(t, retry.Acquired)
	require.Equal(t, own, retry.Token, "the retry claims with the caller's token")
	require.Equal(t, 2, retry.Record.Attempt, "the takeover given back is taken over at once, counting its attempt once")
}

// TestMinReplicasSendsWaitAfterWrites pins the commands: each write is
// followed by WAIT in the same pipeline; a duplicate's SET NX GET too
// (the pipeline is sent before the answer is known), but its WAIT is not
// looked at; a store without MinReplicas sends no WAIT.
func TestMinReplicasSendsWaitAfterWrites(t *testing.T) {
	t.Parallel()
	c, _, s := replicated(t)
	log := &commandLog{}
	c.AddHook(log)
	ctx := t.Context()
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "set wait", log.take(), "a new key")
	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: "k", Token: claim.Token, Lease: time.Minute}))
	require.Equal(t, "evalsha wait", log.take(), "an extension")
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: claim.Token, Name: "charge", Retention: time.Minute}))
	require.Equal(t, "evalsha wait", log.take(), "a step record")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: claim.Token, Retention: time.Minute}))
	require.Equal(t, "evalsha wait", log.take(), "a completion")
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "a", Lease: time.Minute}, {Key: "b", Lease: time.Minute}})
	require.Equal(t, "set set wait", log.take(), "a batch: one WAIT after its writes")
	errs := s.CompleteBatch(ctx, []store.CompleteRequest{
		{Key: "a", Token: out[0].Claim.Token, Retention: time.Minute}, {Key: "b", Token: out[1].Claim.Token, Retention: time.Minute}})
	require.Equal(t, []error{nil, nil}, errs)
	require.Equal(t, "evalsha wait", log.take(), "a batch's completion: one script run, one WAIT")

	plain := newStore(t, c, nil)
	log.take()
	_, err = plain.Acquire(ctx, store.AcquireRequest{Key: "p", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "set", log.take(), "no WAIT without MinReplicas")
}

// TestMinReplicasDistrustsALoneMaster: a script's answer that the token
// lost the key comes, with MinReplicas, only from a master whose replicas
// answer the WAIT: a master with none (one that came back empty after a
// failover, and is a master until it is made a replica) answers a
// shortfall, which the receiver retries, not ErrLeaseLost, on which it
// would give a completion up.
func TestMinReplicasDistrustsALoneMaster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var token store.Token
	token[0] = 1
	complete := store.CompleteRequest{Key: "k", Token: token, Retention: time.Minute}

	lone := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: lone.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, &redisstore.Options{MinReplicas: 1})
	err := s.Complete(ctx, complete)
	requireNotReplicated(t, err)
	require.NotErrorIs(t, err, store.ErrLeaseLost)
	err = s.Extend(ctx, store.ExtendRequest{Key: "k", Token: token, Lease: time.Minute})
	requireNotReplicated(t, err)

	_, _, withReplica := replicated(t)
	require.ErrorIs(t, withReplica.Complete(ctx, complete), store.ErrLeaseLost, "a master with its replica is believed")
}

// TestMinReplicasOptions: MinReplicas and ReplicaTimeout are checked
// against Timeout, the client's ReadTimeout and the client's type.
func TestMinReplicasOptions(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Options{
		{MinReplicas: -1},
		{MinReplicas: 1, ReplicaTimeout: -time.Second},
		{MinReplicas: 1, ReplicaTimeout: 2 * time.Second},                           // the default Timeout
		{MinReplicas: 1, Timeout: 100 * time.Millisecond},                           // below the default ReplicaTimeout
		{MinReplicas: 1, Timeout: 9 * time.Second, ReplicaTimeout: 5 * time.Second}, // the client's default ReadTimeout
	} {
		_, err := redisstore.New(t.Context(), c, &o)
		require.ErrorIs(t, err, store.ErrInvalidConfig, "%+v", o)
	}
	short := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 100 * time.Millisecond})
	defer short.Close()
	_, err := redisstore.New(t.Context(), short, &redisstore.Options{MinReplicas: 1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	require.ErrorContains(t, err, "ReadTimeout")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	_, err = redisstore.New(t.Context(), ring, &redisstore.Options{MinReplicas: 1})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	require.ErrorContains(t, err, "*redis.Ring")
}

// TestReplicatedStoretest runs the conformance suite with MinReplicas 1 on
// a master with a replica: every operation, single and batched, through
// the pipelines that end with WAIT.
func TestReplicatedStoretest(t *testing.T) {
	t.Parallel()
	c, _, _ := replicated(t)
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		h := harness(c)(t)
		h.Store = newStore(t, c, &redisstore.Options{MinReplicas: 1, ReplicaTimeout: healthy})
		return h
	})
}

// waitOnOwnMaster: on a Cluster, each write's WAIT goes to the master that
// took the write. With the replica of one master stopped, the writes of
// that master's keys, and only those, are refused, singly and in a batch
// spanning every master (a ClusterClient's own pipeline would send the
// keyless WAIT to a master of its choosing).
func waitOnOwnMaster(t *testing.T, cc *redis.ClusterClient, nodes []*redistest.Server) {
	ctx := t.Context()
	s := newStore(t, cc, &redisstore.Options{MinReplicas: 1, ReplicaTimeout: healthy})
	stopped := nodes[0]
	replica := replicaOf(t, nodes, stopped)
	replica.Pause()
	defer func() {
		replica.Resume()
		redistest.WaitLinkUp(t, replica.Addr(), 30*time.Second)
	}()
	onStopped := func(key string) bool {
		m, err := cc.MasterForKey(ctx, s.RedisKey(key))
		require.NoError(t, err)
		return m.Options().Addr == stopped.Addr()
	}
	var reqs []store.AcquireRequest
	for i := range 30 {
		reqs = append(reqs, store.AcquireRequest{Key: "w" + strconv.Itoa(i), Lease: time.Minute})
	}
	refused := 0
	for i, o := range s.AcquireBatch(ctx, reqs) {
		if onStopped(reqs[i].Key) {
			requireNotReplicated(t, o.Err)
			refused++
		} else {
			require.NoError(t, o.Err, "%s is on a master whose replica answers", reqs[i].Key)
		}
	}
	require.NotZero(t, refused, "no key of the batch on the stopped replica's master")
	require.Less(t, refused, len(reqs), "every key of the batch on one master")
	for i := range 6 {
		key := "s" + strconv.Itoa(i)
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		if onStopped(key) {
			requireNotReplicated(t, err)
		} else {
			require.NoError(t, err, "%s is on a master whose replica answers", key)
		}
	}
}

// slotMapReloaded: after a master is killed and the cluster has failed
// over, a store's calls on that master's keys succeed again within
// seconds, though its client reloads its slot map by itself only every
// minute (ClusterStateReloadInterval, left at its default): the store has
// it reload when a call fails with a network error. The killed master is
// started again and rejoins as a replica.
func slotMapReloaded(t *testing.T, addrs []string, nodes []*redistest.Server, victim *redistest.Server) {
	ctx := t.Context()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	s := newStore(t, cc, &redisstore.Options{Timeout: 500 * time.Millisecond})
	replica := replicaOf(t, nodes, victim)
	var keys []string // keys of the victim's slots
	for i := 0; len(keys) < 50; i++ {
		key := "r" + strconv.Itoa(i)
		m, err := cc.MasterForKey(ctx, s.RedisKey(key))
		require.NoError(t, err)
		if m.Options().Addr == victim.Addr() {
			keys = append(keys, key)
		}
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: keys[0], Lease: time.Minute})
	require.NoError(t, err)

	victim.Stop()
	redistest.WaitRole(t, replica.Addr(), "master", 30*time.Second)
	// go-redis alone would send the shard's commands to the dead master
	// until its next reload, up to a minute from now.
	const within = 15 * time.Second
	deadline := time.Now().Add(within)
	for i := 1; ; i++ {
		require.Less(t, i, len(keys), "ran out of keys")
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: keys[i], Lease: time.Minute})
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the shard is still unreachable %v after the cluster failed over: %v", within, err)
		time.Sleep(300 * time.Millisecond)
	}
	victim.Start()
	redistest.WaitRole(t, victim.Addr(), "slave", 30*time.Second)
	redistest.WaitLinkUp(t, victim.Addr(), 30*time.Second)
}
