package dedupredisstream_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// faultMessages is how many messages a fault test adds (each twice);
// DEDUP_REDISSTREAM_FAULT_MESSAGES makes the run longer.
func faultMessages() int {
	if n, err := strconv.Atoi(os.Getenv("DEDUP_REDISSTREAM_FAULT_MESSAGES")); err == nil && n > 0 {
		return n
	}
	return 150
}

// ownRedis starts a redis-server of the test's own that writes every
// command to its AOF before answering (a kill loses nothing it answered).
func ownRedis(t *testing.T) *redistest.Server {
	return redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
}

// addTwice adds each message twice, as a producer whose first reply was
// lost does, and returns the entry ids of each message.
func addTwice(t *testing.T, c redis.UniversalClient, stream string, from, n int) map[string][]string {
	t.Helper()
	p, err := dedupredisstream.NewProducer(c, stream, nil)
	require.NoError(t, err)
	ids := map[string][]string{}
	for i := from; i < from+n; i++ {
		id := fmt.Sprint("o-", i)
		for range 2 {
			eid, _, err := p.Add(context.Background(), id, fmt.Appendf(nil, `{"id":%q}`, id), nil)
			require.NoError(t, err)
			ids[id] = append(ids[id], eid)
		}
	}
	return ids
}

// Consumer processes SIGKILLed inside handlers, their pending entries
// taken over by the others; a producer adding each entry twice; a trim
// deleting entries pending to the killed consumer: every message has one
// effect, but those whose entries the trim deleted unhandled, which the
// consumers report by id.
func TestFaultKilledConsumers(t *testing.T) {
	t.Parallel()
	srv := ownRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const stream = "orders"
	require.NoError(t, c.XGroupCreateMkStream(ctx, stream, "billing", "0").Err())
	n := faultMessages()
	entries := addTwice(t, c, stream, 0, n)
	dir := t.TempDir()
	var files []string
	var children []*proc
	for i := range 3 {
		f := filepath.Join(dir, fmt.Sprint("effects-", i))
		files = append(files, f)
		ch := startProc(t, "^TestFaultKilledConsumers$", childEnv+"=1", childRedis+"="+srv.Addr(),
			childStream+"="+stream, childName+"=c"+strconv.Itoa(i), childEffects+"="+f)
		ch.await(t, "started")
		children = append(children, ch)
	}
	counts := func() map[string]int { c, _, _ := readEffects(files); return c }
	eventually(t, func() bool { return len(counts()) >= n/5 }, "a fifth of the effects")

	// Kill c0 inside a handler, then trim the stream past entries pending
	// to it.
	killAt := map[string]time.Time{}
	kill := func(i int) string {
		require.NoError(t, children[i].cmd.Process.Signal(syscall.SIGUSR1))
		id := children[i].await(t, "S ")
		children[i].kill()
		killAt[id] = time.Now()
		return id
	}
	hung0 := kill(0)
	pendingBefore, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "billing", Start: "-", End: "+", Count: 10000, Consumer: "c0"}).Result()
	require.NoError(t, err)
	var deleted []string
	for _, p := range pendingBefore {
		if p.ID != entries[hung0][0] && p.ID != entries[hung0][1] && len(deleted) < 2 {
			deleted = append(deleted, p.ID)
		}
	}
	require.NoError(t, c.XDel(ctx, stream, deleted...).Err())
	eventually(t, func() bool { return len(counts()) >= n/2 }, "half of the effects")
	hung1 := kill(1)

	// Every message done, but those deleted unhandled.
	lostOK := map[string]bool{}
	for id, eids := range entries {
		if contains(deleted, eids[0]) && contains(deleted, eids[1]) {
			lostOK[id] = true
		}
	}
	eventually(t, func() bool {
		cs, _, tr := readEffects(files)
		return len(cs)+len(lostOK) >= n && len(tr) >= len(deleted)
	}, "every message's effect and the trimmed entries reported")
	cs, at, trimmed := readEffects(files)
	doubles := 0
	for id, k := range cs {
		if k > 1 {
			doubles++
			t.Errorf("%s: %d effects", id, k)
		}
	}
	lost := 0
	for id := range entries {
		if cs[id] == 0 && !lostOK[id] {
			lost++
			t.Errorf("%s lost", id)
		}
	}
	sort.Strings(deleted)
	var reported []string
	for id := range trimmed {
		reported = append(reported, id)
	}
	sort.Strings(reported)
	require.Equal(t, deleted, reported, "the trimmed entries reported by id")
	t.Logf("%d messages added twice, 2 consumers killed in handlers, %d pending entries deleted: %d doubles, %d lost, %d reported trimmed (%v); takeover of a killed handler's entry: %v and %v",
		n, len(deleted), doubles, lost, len(reported), reported, at[hung0].Sub(killAt[hung0]).Round(time.Millisecond), at[hung1].Sub(killAt[hung1]).Round(time.Millisecond))
}

// The Redis killed and restarted, and the connections dropped, while a
// consumer works over redisstore on the same Redis (fail-closed): every
// message has one effect, and the consumer reconnects.
func TestFaultRedisOutage(t *testing.T) {
	t.Parallel()
	srv := ownRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const stream = "orders"
	n := faultMessages()
	st, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: "records:"})
	require.NoError(t, err)
	var mu sync.Mutex
	effects := map[string]int{}
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		effects[m.Body.ID]++
		return Receipt{OrderID: m.Body.ID}, nil
	}
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[Order](), h, faultConfig())
	require.NoError(t, err)
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", CreateGroup: true,
		DeadLetterStream: stream + ".dlq", Concurrency: 4, Batch: 8, Block: 100 * time.Millisecond})
	require.NoError(t, err)
	start(t, k)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	addTwice(t, direct, stream, 0, n)
	done := func() int { mu.Lock(); defer mu.Unlock(); return len(effects) }
	eventually(t, func() bool { return done() >= n/4 }, "a quarter of the effects")
	began := time.Now()
	srv.Stop()
	time.Sleep(500 * time.Millisecond) // the outage's length, not a wait for something
	srv.Start()
	outage := time.Since(began)
	eventually(t, func() bool { return done() >= n/2 }, "half of the effects")
	for i := range 3 {
		// Drop every connection of the consumer and its store, then add
		// a message of its own: its effect shows the consumer is back.
		require.NoError(t, direct.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err())
		addTwice(t, direct, stream, n+i, 1)
		eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return effects[fmt.Sprint("o-", n+i)] > 0 }, fmt.Sprint("the consumer back after drop ", i))
	}
	n += 3
	eventually(t, func() bool { return done() >= n }, "every effect")
	eventually(t, func() bool {
		p, err := direct.XPending(ctx, stream, "billing").Result()
		return err == nil && p.Count == 0
	}, "every entry acknowledged")
	mu.Lock()
	defer mu.Unlock()
	doubles := 0
	for id, k := range effects {
		if k > 1 {
			doubles++
			t.Errorf("%s: %d effects", id, k)
		}
	}
	s := k.Stats()
	t.Logf("%d messages added twice, Redis down %v, connections dropped 3 times (CLIENT KILL): %d doubles, %d lost, %d reconnects, %d settle failures, %d deliveries, back to done in %v",
		n, outage.Round(time.Millisecond), doubles, n-len(effects), s.Reconnects, s.SettleFailures, s.Delivered, time.Since(began).Round(time.Millisecond))
}

// proc is this test binary run again as a consumer process, which the test
// kills with SIGKILL.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startProc(t *testing.T, run string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), childMarker); ok {
				select {
				case p.lines <- l:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(p.kill)
	return p
}

// await waits for the child's line starting with prefix, and returns the
// rest of it.
func (p *proc) await(t *testing.T, prefix string) string {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-p.done:
			t.Fatalf("the child ended before it said %q", prefix)
		case <-timer.C:
			t.Fatalf("the child did not say %q within %v", prefix, waitFor)
		}
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(waitFor):
	}
}
