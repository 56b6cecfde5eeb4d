package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSize        = 3
	clusterReadyWithin = 15 * time.Second
	// redis-cli --cluster create normally takes a second or two; the bound
	// only exists so that a wedged node cannot hang the test binary.
	clusterCreateTimeout = 30 * time.Second
)

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
	Require(t, "redis-server", "redis-cli")
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}

	c := &ClusterInstance{t: t}
	for range clusterSize {
		c.nodes = append(c.nodes, launch(t, clusterArgs))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	c.waitHealthy(clusterReadyWithin)
	return c
}

// clusterArgs pins the cluster bus to its own free port: the default,
// port+10000, was never checked for availability and could even collide with
// an unrelated service.
func clusterArgs(dir string, port int) ([]string, error) {
	// The client port was released before this pick, so the kernel may hand
	// it out again.
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
		"--cluster-node-timeout", "5000",
		"--cluster-port", strconv.Itoa(bus),
	}, nil
}

// waitHealthy returns once every node has learned about all peers and all
// slots; before that a cluster client may load a partial slot map from
// whichever node it asks first.
func (c *ClusterInstance) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr()})
		defer clients[i].Close()
	}
	wantKnown := "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))

	var last string
	for {
		healthy := true
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				last = fmt.Sprintf("%s: CLUSTER INFO: %v", c.nodes[i].Addr(), err)
				healthy = false
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, wantKnown) {
				last = fmt.Sprintf("%s:\n%s", c.nodes[i].Addr(), info)
				healthy = false
				break
			}
		}
		if healthy {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("redistest: cluster not ok within %v; last CLUSTER INFO from %s", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// Nodes returns the individual servers, e.g. to inspect a single node with
// Instance.Client or to take one down with Instance.Stop.
func (c *ClusterInstance) Nodes() []*Instance {
	return append([]*Instance(nil), c.nodes...)
}
