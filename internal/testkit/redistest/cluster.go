package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSize          = 3
	clusterReadyWithin   = 15 * time.Second
	clusterCreateTimeout = 30 * time.Second // a wedged node must not hang the tests
)

// ClusterNodeTimeout is the --cluster-node-timeout of ClusterWithReplicas:
// a master silent that long is failed over to its replica.
const ClusterNodeTimeout = 2 * time.Second

// ClusterInstance is a three-master Redis Cluster owned by a test.
type ClusterInstance struct {
	t     testing.TB
	nodes []*Instance
}

// Cluster starts three cluster-enabled redis-server processes on free
// 127.0.0.1 ports, joins them with redis-cli --cluster create (no replicas,
// so every node is a master owning about a third of the slots), waits until
// every node reports cluster_state:ok and stops them all when the test ends.
func Cluster(t testing.TB) *ClusterInstance {
	t.Helper()
	return newCluster(t, 0, 5*time.Second)
}

// ClusterWithReplicas starts three masters and one replica of each
// (--cluster-replicas 1) with a --cluster-node-timeout of ClusterNodeTimeout,
// so that a killed master's replica takes over within about three seconds.
func ClusterWithReplicas(t testing.TB) *ClusterInstance {
	t.Helper()
	c := newCluster(t, 1, ClusterNodeTimeout)
	// A failover before the first sync would find no replica fit to take over.
	for _, n := range c.nodes {
		if n.Role(context.Background()) == "slave" {
			n.WaitSynced(20 * time.Second)
		}
	}
	return c
}

func newCluster(t testing.TB, replicas int, nodeTimeout time.Duration) *ClusterInstance {
	t.Helper()
	Require(t, "redis-server", "redis-cli")
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}

	c := &ClusterInstance{t: t}
	args := func(dir string, port int) ([]string, error) { return clusterArgs(dir, port, nodeTimeout) }
	for range clusterSize * (1 + replicas) {
		c.nodes = append(c.nodes, launch(t, nil, args))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}

	c.WaitHealthy(clusterReadyWithin)
	return c
}

// clusterArgs pins the cluster bus to its own free port: the default,
// port+10000, may be taken. The client port was released before this pick,
// so the kernel may hand it out again.
func clusterArgs(dir string, port int, nodeTimeout time.Duration) ([]string, error) {
	bus := port
	for tries := 0; bus == port; tries++ {
		if tries == 5 {
			return nil, fmt.Errorf("cannot find a cluster bus port distinct from %d", port)
		}
		var err error
		if bus, err = freePort(); err != nil {
			return nil, err
		}
	}
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		"--cluster-port", strconv.Itoa(bus),
		// A master would wait 5 s for more replicas before a first sync.
		"--repl-diskless-sync-delay", "0",
	}, nil
}

// WaitHealthy returns once every running node reports cluster_state:ok and
// has learned about all peers and all slots; before that a cluster client
// may load a partial slot map from whichever node it asks first.
func (c *ClusterInstance) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr()})
		defer clients[i].Close()
		if !n.Running() {
			clients[i] = nil // killed by the test: the others know it failed
		}
	}
	wantKnown := "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))
	var last string
	poll(c.t, timeout, 50*time.Millisecond, func(ctx context.Context) bool {
		for i, cl := range clients {
			if cl == nil {
				continue
			}
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				last = fmt.Sprintf("%s: CLUSTER INFO: %v", c.nodes[i].Addr(), err)
				return false
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, wantKnown) {
				last = fmt.Sprintf("%s:\n%s", c.nodes[i].Addr(), info)
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("cluster not ok within %v; last CLUSTER INFO from %s", timeout, last)
	})
}

// Addrs returns the "127.0.0.1:port" address of every node.
func (c *ClusterInstance) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a new cluster client seeded with every node, closed when
// the test ends.
func (c *ClusterInstance) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Nodes returns the individual servers.
func (c *ClusterInstance) Nodes() []*Instance {
	return append([]*Instance(nil), c.nodes...)
}

// Slot returns the hash slot of key, as the cluster computes it.
func (c *ClusterInstance) Slot(ctx context.Context, key string) int {
	c.t.Helper()
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		cl.Close()
		if err == nil {
			return int(slot)
		}
	}
	c.t.Fatalf("redistest: no node answers CLUSTER KEYSLOT %q", key)
	return -1
}

// MasterOf returns the node that the running nodes agree owns key's slot as
// its master, or nil when they do not agree (a failover under way) or the
// owner does not answer as a master.
func (c *ClusterInstance) MasterOf(ctx context.Context, key string) *Instance {
	c.t.Helper()
	slot := c.Slot(ctx, key)
	owner := ""
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		shards, err := cl.ClusterShards(ctx).Result()
		cl.Close()
		if err != nil {
			return nil
		}
		a := ""
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if int64(slot) < r.Start || int64(slot) > r.End {
					continue
				}
				for _, node := range sh.Nodes {
					if node.Role == "master" {
						a = net.JoinHostPort(node.IP, strconv.FormatInt(node.Port, 10))
					}
				}
			}
		}
		if a == "" || (owner != "" && a != owner) {
			return nil
		}
		owner = a
	}
	for _, n := range c.nodes {
		if n.Addr() == owner && n.Running() && n.Role(ctx) == "master" {
			return n
		}
	}
	return nil
}

// WaitNewMaster waits until a node other than old owns key's slot as master
// (every running node agreeing), and returns it and when that was first seen
// (polling every 20 ms).
func (c *ClusterInstance) WaitNewMaster(key string, old *Instance, within time.Duration) (m *Instance, at time.Time) {
	c.t.Helper()
	poll(c.t, within, 20*time.Millisecond, func(ctx context.Context) bool {
		m, at = c.MasterOf(ctx, key), time.Now()
		return m != nil && m != old
	}, func() string { return fmt.Sprintf("no new master for %q within %v", key, within) })
	return m, at
}
