package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/internal/tcpproxy"
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
	Links []*tcpproxy.Proxy
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
		link := tcpproxy.Start(t, g.Master.Addr())
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
		addr, err := sentinelMaster(ctx, s)
		if err == nil {
			return addr, nil
		}
		last = err
	}
	return "", fmt.Errorf("redistest: no Sentinel names the master: %v", last)
}

// sentinelMaster returns the master's address as the Sentinel s reports it.
func sentinelMaster(ctx context.Context, s *Server) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("redistest: the Sentinel on %s names %q", s.Addr(), hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// WaitFailover waits until every Sentinel names the same master, other
// than old, and that server says it is a master, and returns its address;
// it fails t after within.
//
// Waiting for every Sentinel, not the first, lets a test start old again
// once the Sentinels agree on its successor. A server started again
// empty is still a replica the Sentinels may promote (a loaded machine
// made them judge the new master down and do so once): start it with
// replica-priority 0 (Server.StartWith).
func (g *Sentinel) WaitFailover(t testing.TB, old string, within time.Duration) string {
	t.Helper()
	var addr string
	if !eventually(within, func() bool {
		addr = ""
		for _, s := range g.Sentinels {
			a, err := sentinelMaster(context.Background(), s)
			if err != nil || a == old || (addr != "" && a != addr) {
				return false
			}
			addr = a
		}
		return Role(context.Background(), addr) == "master"
	}) {
		t.Logf("redistest: the Sentinels' events:\n%s", g.Events())
		t.Fatalf("redistest: no failover from %s that every Sentinel knows within %v", old, within)
	}
	return addr
}

// Events returns the lines of the Sentinels' logs that record an event
// (+switch-master, +convert-to-slave, -failover-abort-..., and the like),
// each after its Sentinel's address, for a failing test to log.
func (g *Sentinel) Events() string {
	var b strings.Builder
	for _, s := range g.Sentinels {
		log, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", s.Addr(), err)
			continue
		}
		for line := range strings.Lines(string(log)) {
			if strings.Contains(line, " +") || strings.Contains(line, " -") {
				fmt.Fprintf(&b, "%s: %s", s.Addr(), line)
			}
		}
	}
	return b.String()
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
