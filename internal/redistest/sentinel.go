package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/internal/testenv"
)

// SentinelMaster is the name the Sentinels of StartSentinel know their
// master by.
const SentinelMaster = "dedup-test"

// Sentinel is a master, its replicas and three Sentinels that watch them,
// each a redis-server of the test's own on a loopback port.
type Sentinel struct {
	Master    *Server   // the master at the start
	Replicas  []*Server // its replicas at the start
	Sentinels []*Server
	// Links carry each replica's replication from the master at the
	// start: Links[i].Cut() cuts Replicas[i] off, so that the master goes
	// on acknowledging writes that the replica never gets (a SIGSTOPped
	// replica would still find them in its socket buffer when resumed).
	Links []*Proxy
}

// StartSentinel starts a master with the given number of replicas and
// three Sentinels (quorum 2) that judge the master down after downAfter
// without an answer, and waits until every Sentinel knows every replica
// and the other two Sentinels, so that a failover can begin as soon as
// the master dies. Everything is killed when t ends. A master killed and
// started again (Server.Start) comes back empty, as a master, until the
// Sentinels make it a replica of the new master (about 10s later: they
// look at a returning server every 10s).
func StartSentinel(t testing.TB, replicas int, downAfter time.Duration) *Sentinel {
	t.Helper()
	// A master sends a new replica its data at once, not after the 5s
	// that Redis 7 waits by default for more replicas to share one
	// transfer.
	sync := []string{"--repl-diskless-sync-delay", "0"}
	g := &Sentinel{Master: StartServer(t, sync...)}
	for range replicas {
		link := StartProxy(t, g.Master.Addr())
		_, port, _ := net.SplitHostPort(link.Addr())
		r := StartServer(t, append([]string{"--replicaof", "127.0.0.1", port}, sync...)...)
		WaitLinkUp(t, r.Addr(), 30*time.Second)
		g.Replicas, g.Links = append(g.Replicas, r), append(g.Links, link)
	}
	for range 3 {
		s := newServer(t, testenv.FreePort(t), []string{"--sentinel"})
		s.conf = filepath.Join(s.dir, "sentinel.conf")
		// A Sentinel rewrites its configuration file, so each has its own.
		conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, g.Master.Port(), downAfter.Milliseconds())
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("redistest: write %s: %v", s.conf, err)
		}
		s.Start()
		g.Sentinels = append(g.Sentinels, s)
	}
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		ok := eventually(60*time.Second, func() bool {
			ctx := context.Background()
			r, err1 := c.Replicas(ctx, SentinelMaster).Result()
			o, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			return err1 == nil && err2 == nil && len(r) == replicas && len(o) == 2
		})
		_ = c.Close()
		if !ok {
			t.Fatalf("redistest: the Sentinel on %s does not know %d replicas and 2 Sentinels within 60s", s.Addr(), replicas)
		}
	}
	return g
}

// Addrs returns the Sentinels' addresses, for FailoverOptions.SentinelAddrs.
func (g *Sentinel) Addrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// MasterAddr returns the master's address as the first Sentinel that
// answers reports it.
func (g *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		_ = c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("redistest: no Sentinel names the master: %v", last)
}

// WaitFailover waits until the Sentinels name a master other than old and
// that server says it is a master, and returns its address; it fails t
// after within.
func (g *Sentinel) WaitFailover(t testing.TB, old string, within time.Duration) string {
	t.Helper()
	var addr string
	if !eventually(within, func() bool {
		a, err := g.MasterAddr(context.Background())
		if err != nil || a == old {
			return false
		}
		addr = a
		return Role(context.Background(), a) == "master"
	}) {
		for _, s := range g.Sentinels {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Logf("redistest: the log of the Sentinel on %s:\n%s", s.Addr(), log)
		}
		t.Fatalf("redistest: no Sentinel failover from %s within %v", old, within)
	}
	return addr
}

// Server returns the server of the group on addr (the master or a
// replica), or nil.
func (g *Sentinel) Server(addr string) *Server {
	for _, s := range append([]*Server{g.Master}, g.Replicas...) {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}
