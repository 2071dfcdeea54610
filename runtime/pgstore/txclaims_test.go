package pgstore

import (
	goruntime "runtime"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
)

// TestTxClaimsForgetsConnectionsGone: the entries of connections the pool
// dropped go as new ones come, so that the map stays the size of the live
// connections (within a factor of two), while a live connection's claims
// survive every pruning.
func TestTxClaimsForgetsConnectionsGone(t *testing.T) {
	var c txClaims
	id := runtime.Identity{Scope: "s", Operation: "T.Op", Key: "k"}
	live := new(pgx.Conn)
	c.add(live, "1", id, 1)
	for i := range 2000 {
		c.add(new(pgx.Conn), "2", id, int64(i)) // dropped at once
		if i%50 == 0 {
			goruntime.GC()
		}
	}
	goruntime.GC()
	c.add(new(pgx.Conn), "3", id, 1)
	if n := len(c.byConn); n > 2*50+16 {
		t.Errorf("%d connections remembered after 2000 came and went, 1 of them live", n)
	}
	if own, running := c.lookup(live, "1", id, 1); !own || !running {
		t.Errorf("the live connection's claim: own %v, running %v; want both", own, running)
	}
	goruntime.KeepAlive(live)
}

// TestTxClaimsWroteOnlyForItsTransaction: an outcome written by a call
// whose transaction is no longer its connection's latest is not taken for
// the next transaction's own, and one written by the latest is.
func TestTxClaimsWroteOnlyForItsTransaction(t *testing.T) {
	var c txClaims
	id := runtime.Identity{Scope: "s", Operation: "T.Op", Key: "k"}
	conn := new(pgx.Conn)
	old := c.add(conn, "10", id, 1)
	cur := c.add(conn, "11", id, 5)
	c.wrote(old, 2)
	if own, _ := c.lookup(conn, "11", id, 2); own {
		t.Error("an outcome the connection's earlier transaction wrote is taken for the latest one's")
	}
	c.wrote(cur, 6)
	if own, running := c.lookup(conn, "11", id, 6); !own || running {
		t.Errorf("the latest transaction's outcome: own %v, running %v; want own, not running", own, running)
	}
	if own, running := c.lookup(conn, "11", id, 5); !own || !running {
		t.Errorf("the latest transaction's claim: own %v, running %v; want both", own, running)
	}
	goruntime.KeepAlive(conn)
}
