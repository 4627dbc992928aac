package dedupkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/redistest"
)

// process is one consumer process of TestScaleOut.
type process struct {
	name    string
	cmd     *exec.Cmd
	effects string
	stderr  *bytes.Buffer
	exited  chan error
}

// TestScaleOut runs consumer processes (the test binary re-executed) in
// one group over a 3-master Redis Cluster, each with a tieredstore, while
// the orders are produced: two start, a third joins mid-stream, one is
// killed with SIGKILL inside a handler, and a fourth starts. Every order
// has its effect exactly once across the processes, none is lost, and
// after the others stop cleanly every partition is committed to its end.
// It logs how long the group took to recover from the kill: from the
// SIGKILL to the effect, in another process, of the order the killed one
// was handling.
func TestScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	const topic, group, count = "orders", "billing", 3000
	brokers := startKafka(t, partitions, topic)
	cc, _ := redistest.StartCluster(t)
	prefix := redistest.Prefix(t, cc)
	dir := t.TempDir()

	start := func(name string) *process {
		p := &process{name: name, effects: filepath.Join(dir, name+".effects"), stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(os.Args[0])
		p.cmd.Env = append(os.Environ(),
			childEnv+"=1",
			childBrokers+"="+strings.Join(brokers, ","),
			childTopic+"="+topic,
			childGroup+"="+group,
			childRedis+"="+strings.Join(cc.Options().Addrs, ","),
			childRedisPrefix+"="+prefix,
			childEffects+"="+p.effects,
		)
		p.cmd.Stderr = p.stderr
		require.NoError(t, p.cmd.Start())
		go func() { p.exited <- p.cmd.Wait() }() // ends with the process, which the test ends
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.exited
			if t.Failed() && p.stderr.Len() > 0 {
				t.Logf("%s stderr:\n%s", p.name, p.stderr.String())
			}
		})
		return p
	}

	msgs, want := orderStream(t, count)
	var wantAll []string
	for p := range partitions {
		wantAll = append(wantAll, want[p]...)
	}
	w := newWriter(t, brokers)
	produced := make(chan int, len(msgs)) // how many were produced, after each chunk
	var producing sync.WaitGroup
	producing.Go(func() {
		for i, chunk := range slices.Collect(slices.Chunk(msgs, 25)) {
			out := make([]kafka.Message, len(chunk))
			for j, m := range chunk {
				m.Topic = topic
				out[j] = m
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := w.WriteMessages(ctx, out...)
			cancel()
			if err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			produced <- min((i+1)*25, len(msgs))
			time.Sleep(40 * time.Millisecond)
		}
	})
	until := func(n int) {
		for {
			select {
			case got := <-produced:
				if got >= n {
					return
				}
			case <-time.After(time.Minute):
				t.Fatalf("producing stalled before %d messages", n)
			}
		}
	}

	a, b := start("a"), start("b")
	until(len(msgs) / 4)
	c := start("c") // joins mid-stream
	until(len(msgs) / 2)

	// Kill a in the middle of a handler.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGUSR1))
	var stuck string
	require.Eventually(t, func() bool {
		for _, l := range lines(t, a.effects) {
			if l[0] == "S" {
				stuck = l[1]
				return true
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond, "a never hung in a handler")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	d := start("d")
	producing.Wait()

	procs := []*process{a, b, c, d}
	effects := func() map[string][]int64 { // id -> effect times
		out := map[string][]int64{}
		for _, p := range procs {
			for _, l := range lines(t, p.effects) {
				if l[0] == "E" {
					at, err := strconv.ParseInt(l[3], 10, 64)
					require.NoError(t, err)
					out[l[1]] = append(out[l[1]], at)
				}
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(effects()) >= len(wantAll) }, 2*time.Minute, 50*time.Millisecond, "orders processed")
	for _, p := range []*process{b, c, d} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range []*process{b, c, d} {
		select {
		case err := <-p.exited:
			require.NoError(t, err, "%s did not stop cleanly: %s", p.name, p.stderr.String())
			p.exited <- err // for the cleanup
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", p.name)
		}
	}

	got := effects()
	var fx deduptest.Effects
	for id, at := range got {
		for range at {
			fx.Record(id)
		}
	}
	fx.ExactlyOnce(wantAll...).Check(t)
	require.Contains(t, got, stuck)
	t.Logf("group recovered from the SIGKILL in %v (kill to the effect of order %s, which the killed process was handling)",
		time.Unix(0, got[stuck][0]).Sub(killed).Round(time.Millisecond), stuck)
	require.Equal(t, endOffsets(t, brokers, topic, partitions), committed(t, brokers, group, topic, partitions))
}

// lines returns the fields of each line of an effects file.
func lines(t testing.TB, path string) [][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}
