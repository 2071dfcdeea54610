package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/faulttest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestNetworkFaults runs concurrent duplicates through an in-process
// toxiproxy in front of PostgreSQL, with latency, held replies, resets
// before and after the server applied a statement, cut requests and sliced
// replies at the claim and at the completion (see faulttest.Faults).
func TestNetworkFaults(t *testing.T) {
	direct := testPool(t)
	proxy, proxied := proxiedPool(t)
	faulttest.Run(t, faulttest.Target{
		Proxied: pgstore.New(proxied),
		Direct:  pgstore.New(direct),
		Proxies: []*faulttest.Proxy{proxy},
	}, faulttest.Config{})
}

// proxiedPool returns a pool whose connections go through an in-process
// toxiproxy in front of the test server, and the proxy.
func proxiedPool(t *testing.T) (*faulttest.Proxy, *pgxpool.Pool) {
	t.Helper()
	testPool(t) // migrated
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faulttest.NewProxy(t, "postgres", fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = proxy.HostPort()
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 16
	// One round trip per statement: with the default statement cache a
	// connection's first use of a statement prepares it first, and a
	// reset "after the server applied it" would hit the prepare instead.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	proxied, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)
	return proxy, proxied
}
