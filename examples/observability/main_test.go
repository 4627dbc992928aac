package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	rulesFile = "../../deploy/prometheus/dedup-rules.yml"
	rulesTest = "../../deploy/prometheus/dedup-rules.test.yml"
)

// TestRules runs promtool on the rules users are given: they parse, and
// their unit tests (each alert firing and silent) pass.
func TestRules(t *testing.T) {
	t.Parallel()
	promtool := testenv.Binary(t, "promtool", "scripts/services.sh prometheus")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTest}} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		cancel()
		t.Logf("promtool %v:\n%s", args, out)
		require.NoError(t, err, "promtool %v", args)
		require.Contains(t, string(out), "SUCCESS")
	}
}

// TestPrometheus runs the service against the shared NATS server with a
// real Prometheus scraping its /metrics every second and evaluating the
// rules: the known workload's counts, read back through Prometheus's query
// API, are what was sent, and the dead-letter alert fires on the names the
// exporter really exposes.
func TestPrometheus(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS.Addr(t)
	promBin := testenv.Binary(t, "prometheus", "scripts/services.sh prometheus")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	stream := freshStream(t, natsURL)

	var traces syncBuffer
	svc, err := Start(ctx, Config{
		NATSURL: natsURL, Stream: stream, MetricsAddr: "127.0.0.1:0", Traces: &traces,
		Backoff: dedup.ExponentialBackoff{Base: 50 * time.Millisecond, Max: time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, svc.Shutdown(sctx))
	})

	prom := startPrometheus(t, promBin, svc.MetricsAddr())

	w, err := PublishWorkload(ctx, svc.js, svc.Subject())
	require.NoError(t, err)
	require.Equal(t, Workload{Messages: 200, Unique: 145, Duplicates: 50, Poison: 5, FailOnce: 10}, w)

	// What the workload comes to: each unique order processed once (the
	// FailOnce ones after one failed run, retried), each copy answered as
	// a duplicate, each poison message dead-lettered as undecodable.
	want := map[string]map[string]float64{
		`sum by (dedup_reason) (dedup_deliveries_total{job="dedup"})`: {
			"processed":     float64(w.Unique),
			"duplicate":     float64(w.Duplicates),
			"handler-error": float64(w.FailOnce),
			"undecodable":   float64(w.Poison),
		},
		`sum by (dedup_reason) (dedup_dead_letters_total{job="dedup"})`: {
			"undecodable": float64(w.Poison),
		},
		// Every delivery, the retried ones included.
		`sum(messaging_client_consumed_messages_total{job="dedup"})`: {
			"": float64(w.Messages + w.FailOnce),
		},
		// Every delivery the receiver handled: not the poison ones, refused
		// before it.
		`sum(messaging_process_duration_seconds_count{job="dedup"})`: {
			"": float64(w.Messages + w.FailOnce - w.Poison),
		},
		// Every run of the handler: once per unique order, twice for the
		// FailOnce ones.
		`sum(dedup_handler_duration_seconds_count{job="dedup"})`: {
			"": float64(w.Unique + w.FailOnce),
		},
	}
	for q, exp := range want {
		got := prom.waitFor(ctx, t, q, "dedup_reason", exp)
		t.Logf("%s = %v", q, got)
	}
	// The dead-letter alert fires on what the exporter exposes.
	got := prom.waitFor(ctx, t, `ALERTS{alertname="DedupDeadLetters",alertstate="firing",job="dedup"}`, "dedup_reason",
		map[string]float64{"undecodable": 1})
	t.Logf("ALERTS{alertname=\"DedupDeadLetters\"} = %v", got)

	// Every rule evaluates without error on the real series.
	prom.requireRulesHealthy(ctx, t)

	st := svc.consumer.Stats()
	t.Logf("consumer stats: %+v", st)
	require.EqualValues(t, w.Messages+w.FailOnce, st.Delivered)
	require.EqualValues(t, w.Unique+w.Duplicates, st.Acked)
	require.EqualValues(t, w.FailOnce, st.RetriedInPlace+st.RetriedLater)
	require.EqualValues(t, w.Poison, st.DeadLettered)
	// One span per delivery reached the trace exporter once flushed.
	require.NoError(t, svc.tp.ForceFlush(ctx))
	require.Contains(t, traces.String(), `"Name":"process `+svc.Subject())
}

// prometheusServer is a Prometheus server started by the test.
type prometheusServer struct{ url string }

// startPrometheus starts Debian's prometheus on a free port with a data
// directory of its own, scraping target every second as job "dedup" and
// evaluating the rules every second; it is killed (by its PID) when t
// ends.
func startPrometheus(t *testing.T, bin, target string) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	require.NoError(t, err)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: dedup
    static_configs:
      - targets: [%q]
`, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o600))
	port := testenv.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var logs syncBuffer
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("prometheus (pid %d) did not exit within 10s of SIGKILL", cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", logs.String())
		}
	})
	p := &prometheusServer{url: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus was not ready within 30s (%v):\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query runs an instant query and returns its samples, by the value of
// label (the empty string for a sample without it).
func (p *prometheusServer) query(ctx context.Context, q, label string) (map[string]float64, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", q, v, err)
		}
		out[s.Metric[label]] = f
	}
	return out, nil
}

// waitFor polls q until its samples are exactly want, failing t after a
// minute, or when ctx ends first.
func (p *prometheusServer) waitFor(ctx context.Context, t *testing.T, q, label string, want map[string]float64) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got map[string]float64
	var err error
	for {
		got, err = p.query(ctx, q, label)
		if err == nil && equal(got, want) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: got %v (err %v), want %v", q, got, err, want)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// requireRulesHealthy waits until Prometheus has evaluated every rule of
// the rules file, and requires that none failed.
func (p *prometheusServer) requireRulesHealthy(ctx context.Context, t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var r struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name           string    `json:"name"`
						Health         string    `json:"health"`
						LastError      string    `json:"lastError"`
						LastEvaluation time.Time `json:"lastEvaluation"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		err := p.get(ctx, "/api/v1/rules", &r)
		evaluated, n := err == nil, 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				n++
				require.NotEqual(t, "err", rule.Health, "rule %s of %s: %s", rule.Name, g.Name, rule.LastError)
				evaluated = evaluated && rule.Health == "ok" && !rule.LastEvaluation.IsZero()
			}
		}
		if evaluated && n > 0 {
			t.Logf("%d rules in %d groups evaluated without error", n, len(r.Data.Groups))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the rules were not all evaluated in time (err %v): %+v", err, r.Data.Groups)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// get decodes the JSON answer of Prometheus's path into v.
func (p *prometheusServer) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, body)
	}
	return nil
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// deleteStreams deletes the test's stream and its dead-letter stream when
// t ends.
func deleteStreams(t *testing.T, natsURL, stream string) {
	t.Cleanup(func() {
		nc, err := natsgo.Connect(natsURL)
		if err != nil {
			t.Errorf("delete the streams: %v", err)
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Errorf("delete the streams: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range []string{stream, stream + "_DLQ"} {
			if err := js.DeleteStream(ctx, name); err != nil {
				t.Errorf("delete stream %s: %v", name, err)
			}
		}
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunStops: run publishes the workload, serves until its context ends
// (SIGINT or SIGTERM in main), then shuts down cleanly and returns nil.
func TestRunStops(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS.Addr(t)
	stream := freshStream(t, natsURL)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{NATSURL: natsURL, Stream: stream, MetricsAddr: "127.0.0.1:0"}, true)
	}()
	js := jetStream(t, natsURL)
	// The consumer got the whole workload.
	waitConsumer(t, js, stream, done, func(ci *jetstream.ConsumerInfo) bool { return ci.Delivered.Stream >= 200 })
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its context's end")
	}
}

// TestRunExitsWhenConsumerStops: when the consumer stops unasked (its
// JetStream consumer deleted), run returns an error saying so: main then
// exits with status 1 and Prometheus sees the target down.
func TestRunExitsWhenConsumerStops(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS.Addr(t)
	stream := freshStream(t, natsURL)
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), Config{NATSURL: natsURL, Stream: stream, MetricsAddr: "127.0.0.1:0"}, false)
	}()
	js := jetStream(t, natsURL)
	// The consumer is pulling: its Start is done.
	waitConsumer(t, js, stream, done, func(ci *jetstream.ConsumerInfo) bool { return ci.NumWaiting > 0 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, js.DeleteConsumer(ctx, stream, "billing"))
	select {
	case err := <-done:
		require.ErrorContains(t, err, "the consumer stopped unasked")
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its consumer's deletion")
	}
}

// freshStream names a stream of the test's own, deleted (with its
// dead-letter stream) when t ends.
func freshStream(t *testing.T, natsURL string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	stream := "OBS_TEST_" + hex.EncodeToString(b)
	deleteStreams(t, natsURL, stream)
	return stream
}

// jetStream connects to natsURL for the test's own look-ups.
func jetStream(t *testing.T, natsURL string) jetstream.JetStream {
	nc, err := natsgo.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// waitConsumer polls the durable consumer "billing" of stream until ok
// says yes, failing t after 30s or if run returns first.
func waitConsumer(t *testing.T, js jetstream.JetStream, stream string, done <-chan error, ok func(*jetstream.ConsumerInfo) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		c, err := js.Consumer(ctx, stream, "billing")
		var ci *jetstream.ConsumerInfo
		if err == nil {
			ci, err = c.Info(ctx)
		}
		cancel()
		if err == nil && ok(ci) {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-deadline:
			t.Fatalf("the consumer did not get there within 30s (last error %v, info %+v)", err, ci)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
