// Package redistest starts Redis Clusters that a test owns, so that it can
// reshard them (move a slot key by key, with the steps interleaved with the
// test's own calls) and fail masters over to their replicas without
// disturbing the shared cluster other tests use.
//
// A cluster is made of redis-server processes on loopback ports with their
// files in the test's temporary directory, created with redis-cli --cluster
// create and stopped when the test ends. Without redis-server the test is
// skipped, except under CI (see internal/testenv), where it fails.
//
// A slot migration follows the procedure of the Redis Cluster specification
// (and of redis-cli --cluster reshard), one step per call:
//
//	m, _ := cl.BeginMigration(ctx, slot, target) // CLUSTER SETSLOT IMPORTING, then MIGRATING
//	keys, _ := m.Keys(ctx, 10)                   // CLUSTER GETKEYSINSLOT on the source
//	_ = m.Move(ctx, keys[0])                      // MIGRATE ... KEYS: these keys now live on the target
//	_ = m.Finish(ctx)                            // CLUSTER SETSLOT NODE everywhere
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
)

// Node is one redis-server of a [Cluster].
type Node struct {
	// Addr is host:port; ID is the node's cluster id.
	Addr string
	ID   string
	// Client talks to this node only.
	Client *redis.Client

	dir string
	cmd *exec.Cmd
}

// Cluster is a Redis Cluster owned by one test.
type Cluster struct {
	Nodes []*Node
	t     testing.TB
}

// StartCluster starts a cluster of masters masters with replicas replicas
// each (3 masters at least: redis-cli refuses fewer), waits until every
// node reports cluster_state:ok and every replica is in sync, and stops it
// when the test ends.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	bin := lookServer(t)
	c := &Cluster{t: t}
	t.Cleanup(c.stop)
	n := masters * (1 + replicas)
	used := map[int]bool{}
	var addrs []string
	for i := range n {
		node, err := startNode(bin, filepath.Join(t.TempDir(), strconv.Itoa(i)), used, true)
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, node)
		addrs = append(addrs, node.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	for _, node := range c.Nodes {
		id, err := node.Client.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("%s: CLUSTER MYID: %v", node.Addr, err)
		}
		node.ID = id
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartServer starts a standalone redis-server (no persistence) on a free
// loopback port, stopped when the test ends: a server the test may pause
// (CLIENT PAUSE, DEBUG SLEEP) without touching anyone else's.
func StartServer(t testing.TB) *Node {
	t.Helper()
	node, err := startNode(lookServer(t), t.TempDir(), map[int]bool{}, false)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Nodes: []*Node{node}, t: t}
	t.Cleanup(c.stop)
	return node
}

// lookServer returns redis-server's path, checking that redis-cli is there
// too; it skips the test (fails it under CI) when they are not.
func lookServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		_, err = exec.LookPath("redis-cli")
	}
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server or redis-cli not found (scripts/test.sh installs them): %v", err)
		}
		t.Skipf("redis-server or redis-cli not found: %v", err)
	}
	return bin
}

// startNode starts a redis-server (cluster-enabled when cluster is set) on
// a free loopback port whose bus port (port+10000) is free too, retrying on
// another port when the bind fails.
func startNode(bin, dir string, used map[int]bool, cluster bool) (*Node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastLog []byte
	for range 10 {
		port := 10000 + rand.IntN(12700)
		if used[port] || used[port+10000] || !free(port) || !free(port+10000) {
			continue
		}
		used[port], used[port+10000] = true, true
		args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
			"--daemonize", "no", "--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log")}
		if cluster {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		}
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for range 100 {
			if cl.Ping(context.Background()).Err() == nil {
				return &Node{Addr: addr, Client: cl, dir: dir, cmd: cmd}, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		lastLog, _ = os.ReadFile(filepath.Join(dir, "redis.log"))
	}
	return nil, fmt.Errorf("redistest: redis-server did not start on 10 ports; last log:\n%s", lastLog)
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func (c *Cluster) stop() {
	for _, n := range c.Nodes {
		if n.Client != nil {
			_ = n.Client.Close()
		}
		if n.cmd != nil && n.cmd.Process != nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
		}
	}
}

// Addrs returns the address of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// NewClient returns a cluster client on the cluster's nodes, closed when the
// test ends. opt may be nil; its Addrs are replaced.
func (c *Cluster) NewClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	o := redis.ClusterOptions{}
	if opt != nil {
		o = *opt
	}
	o.Addrs = c.Addrs()
	cc := redis.NewClusterClient(&o)
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the node with the given address or id, or nil.
func (c *Cluster) Node(addrOrID string) *Node {
	for _, n := range c.Nodes {
		if n.Addr == addrOrID || n.ID == addrOrID {
			return n
		}
	}
	return nil
}

// nodeInfo is one line of CLUSTER NODES.
type nodeInfo struct {
	id, addr, master string
	isMaster, failed bool
	slots            []string
}

func clusterNodes(ctx context.Context, n *Node) ([]nodeInfo, error) {
	text, err := n.Client.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: CLUSTER NODES: %w", n.Addr, err)
	}
	var out []nodeInfo
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, nodeInfo{id: f[0], addr: addr, master: f[3],
			isMaster: strings.Contains(f[2], "master"), failed: strings.Contains(f[2], "fail"), slots: f[8:]})
	}
	return out, sc.Err()
}

// Masters returns the nodes that are masters, as the first node that
// answers sees them.
func (c *Cluster) Masters(ctx context.Context) ([]*Node, error) {
	infos, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Node
	for _, in := range infos {
		if in.isMaster && !in.failed {
			if n := c.Node(in.id); n != nil {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// ReplicasOf returns the replicas of master.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Node) ([]*Node, error) {
	infos, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Node
	for _, in := range infos {
		if !in.isMaster && in.master == master.ID {
			if n := c.Node(in.id); n != nil {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func (c *Cluster) view(ctx context.Context) ([]nodeInfo, error) {
	var err error
	for _, n := range c.Nodes {
		var infos []nodeInfo
		if infos, err = clusterNodes(ctx, n); err == nil {
			return infos, nil
		}
	}
	return nil, err
}

// MasterOf returns the master that owns slot, as the first node that
// answers sees it.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (*Node, error) {
	infos, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if !in.isMaster {
			continue
		}
		for _, r := range in.slots {
			if strings.HasPrefix(r, "[") {
				continue // a migration in progress, not ownership
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if hi == "" {
				b, err2 = a, nil
			}
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				if n := c.Node(in.id); n != nil {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no master owns slot %d", slot)
}

// KeySlot returns the cluster slot of key.
func (c *Cluster) KeySlot(ctx context.Context, key string) (int, error) {
	n, err := c.Nodes[0].Client.ClusterKeySlot(ctx, key).Result()
	return int(n), err
}

// WaitHealthy waits until every node reports cluster_state:ok, agrees on
// who owns every slot, and every replica's link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.healthy(ctx); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redistest: cluster not healthy after %v: %w", timeout, last)
}

func (c *Cluster) healthy(ctx context.Context) error {
	var first string
	for _, n := range c.Nodes {
		info, err := n.Client.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", n.Addr)
		}
		infos, err := clusterNodes(ctx, n)
		if err != nil {
			return err
		}
		var owners []string
		for _, in := range infos {
			if in.isMaster && !in.failed {
				var own []string
				for _, r := range in.slots {
					if !strings.HasPrefix(r, "[") { // an open migration, not ownership
						own = append(own, r)
					}
				}
				if len(own) > 0 {
					owners = append(owners, in.id+" "+strings.Join(own, " "))
				}
			}
			if in.id == n.ID && !in.isMaster {
				repl, err := n.Client.Info(ctx, "replication").Result()
				if err != nil {
					return err
				}
				if !strings.Contains(repl, "master_link_status:up") {
					return fmt.Errorf("%s: replica link is not up", n.Addr)
				}
			}
		}
		slices.Sort(owners)
		view := strings.Join(owners, "|")
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Errorf("%s sees another slot map", n.Addr)
		}
	}
	return nil
}

// Migration is one slot moving from one master to another, driven step by
// step by the test.
type Migration struct {
	Slot     int
	From, To *Node
	c        *Cluster
}

// BeginMigration opens the migration of slot from its owner to to: CLUSTER
// SETSLOT IMPORTING on the target, then MIGRATING on the source (the order
// the specification gives). From then on the source answers ASK for keys it
// no longer holds and TRYAGAIN for multi-key commands whose keys are split.
func (c *Cluster) BeginMigration(ctx context.Context, slot int, to *Node) (*Migration, error) {
	from, err := c.MasterOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: slot %d is already on %s", slot, to.Addr)
	}
	if err := to.Client.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID).Err(); err != nil {
		return nil, fmt.Errorf("redistest: %s: SETSLOT %d IMPORTING: %w", to.Addr, slot, err)
	}
	if err := from.Client.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID).Err(); err != nil {
		return nil, fmt.Errorf("redistest: %s: SETSLOT %d MIGRATING: %w", from.Addr, slot, err)
	}
	return &Migration{Slot: slot, From: from, To: to, c: c}, nil
}

// Keys returns up to n keys of the slot still on the source.
func (m *Migration) Keys(ctx context.Context, n int) ([]string, error) {
	keys, err := m.From.Client.ClusterGetKeysInSlot(ctx, m.Slot, n).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: GETKEYSINSLOT %d: %w", m.From.Addr, m.Slot, err)
	}
	return keys, nil
}

// Move migrates keys to the target with one MIGRATE ... KEYS (a key no
// longer on the source is ignored by Redis).
func (m *Migration) Move(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	host, port, _ := strings.Cut(m.To.Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.From.Client.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redistest: %s: MIGRATE %d keys of slot %d: %w", m.From.Addr, len(keys), m.Slot, err)
	}
	return nil
}

// MoveAll migrates every key still on the source, batch keys per MIGRATE.
func (m *Migration) MoveAll(ctx context.Context, batch int) error {
	for {
		keys, err := m.Keys(ctx, batch)
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		if err := m.Move(ctx, keys...); err != nil {
			return err
		}
	}
}

// Finish assigns the slot to the target on the target, the source and
// every other master (CLUSTER SETSLOT NODE), closing the migration; the
// source must hold no key of the slot any more.
func (m *Migration) Finish(ctx context.Context) error {
	masters, err := m.c.Masters(ctx)
	if err != nil {
		return err
	}
	order := []*Node{m.To, m.From}
	for _, n := range masters {
		if n != m.To && n != m.From {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.Client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.To.ID).Err(); err != nil {
			return fmt.Errorf("redistest: %s: SETSLOT %d NODE: %w", n.Addr, m.Slot, err)
		}
	}
	return m.c.WaitHealthy(ctx, 30*time.Second)
}

// Failover runs CLUSTER FAILOVER (a manual failover: the master stops
// taking writes, the replica catches up with it, then takes over) on
// replica and waits until the whole cluster sees it as a master.
func (c *Cluster) Failover(ctx context.Context, replica *Node) error {
	if err := replica.Client.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return fmt.Errorf("redistest: %s: CLUSTER FAILOVER: %w", replica.Addr, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.Nodes {
			infos, err := clusterNodes(ctx, n)
			if err != nil {
				return err
			}
			for _, in := range infos {
				if in.id == replica.ID && !in.isMaster {
					ok = false
				}
			}
		}
		if ok {
			return c.WaitHealthy(ctx, 30*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redistest: %s did not become a master within 30s", replica.Addr)
}
