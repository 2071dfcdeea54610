package redisstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/faulttest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestNetworkFaults runs concurrent duplicates through an in-process
// toxiproxy in front of the standalone Redis (see faulttest.Faults).
func TestNetworkFaults(t *testing.T) {
	direct := standaloneClient(t)
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faulttest.NewProxy(t, "redis", opt.Addr)
	opt.Addr = proxy.Addr()
	opt.PoolSize = 16
	opt.ContextTimeoutEnabled = true // a held reply ends at the caller's deadline
	opt.ReadTimeout, opt.WriteTimeout = 5*time.Second, 5*time.Second
	proxied := redis.NewClient(opt)
	t.Cleanup(func() { _ = proxied.Close() })
	prefix := testPrefix(t)
	faulttest.Run(t, faulttest.Target{
		Proxied: newStore(t, proxied, redisstore.WithPrefix(prefix)),
		Direct:  newStore(t, direct, redisstore.WithPrefix(prefix)),
		Proxies: []*faulttest.Proxy{proxy},
	}, faulttest.Config{})
}

// TestNetworkFaultsCluster runs the same faults on Redis Cluster, with one
// proxy per master. The masters announce their own addresses (CLUSTER
// SLOTS, MOVED), so a client would bypass proxies it was merely pointed
// at; its dialer maps every announced address to that master's proxy.
func TestNetworkFaultsCluster(t *testing.T) {
	direct := clusterClient(t)
	addrs := testenv.RedisClusterAddrs(t)
	toProxy := map[string]string{}
	var proxies []*faulttest.Proxy
	for _, a := range addrs {
		p := faulttest.NewProxy(t, "redis-cluster-"+a, a)
		toProxy[a] = p.Addr()
		proxies = append(proxies, p)
	}
	var d net.Dialer
	proxied := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, PoolSize: 16, ContextTimeoutEnabled: true,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := toProxy[addr]; ok {
				addr = p
			} else {
				t.Errorf("cluster client dialed %s, which has no proxy", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = proxied.Close() })
	prefix := testPrefix(t)
	faulttest.Run(t, faulttest.Target{
		Proxied: newStore(t, proxied, redisstore.WithPrefix(prefix)),
		Direct:  newStore(t, direct, redisstore.WithPrefix(prefix)),
		Proxies: proxies,
	}, faulttest.Config{})
}
