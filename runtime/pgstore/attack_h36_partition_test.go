package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// h36Partition is a TCP proxy that forwards until a client sends a message
// containing trigger; from then on that connection is partitioned: nothing
// more is forwarded either way, and the server's side stays open (the
// server never hears that the client is gone), until the test ends.
type h36Partition struct {
	ln      net.Listener
	trigger []byte
	hit     atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newH36Partition(t *testing.T, upstream string, trigger string) *h36Partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &h36Partition{ln: ln, trigger: []byte(trigger)}
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			var cut atomic.Bool
			go func() { // server to client
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !cut.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = c.Close()
						return
					}
				}
			}()
			go func() { // client to server
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && !cut.Load() {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
						if bytes.Contains(buf[:n], p.trigger) {
							cut.Store(true)
							p.hit.Store(true)
						}
					}
					if err == io.EOF || err != nil {
						if !cut.Load() {
							_ = s.Close()
						}
						return
					}
				}
			}()
		}
	}()
	return p
}

// Promise (Migrate): "safe to run on every start, beside traffic"; the
// 250 ms lock_timeout bounds how long Migrate's statements wait for the
// table. It bounds waiting, not holding. Schedule: the table has no mark
// (a migration tool applied it, or an earlier release), so a starting
// replica's Migrate runs the schema: its ALTER TABLE takes the ACCESS
// EXCLUSIVE lock at once (nobody holds the table), and then the replica's
// network partitions (or the process is paused) before its COMMIT reaches
// the server. Migrate returns its context's error; the server, which never
// hears that the client is gone (no idle_in_transaction_session_timeout by
// default, TCP keepalive after hours), keeps the transaction open, idle in
// transaction, holding ACCESS EXCLUSIVE on idem_records: every claim and
// every replay of every key on every other replica waits for it. A
// partitioned DoTx or Do holds at most its own row.
func TestH36MigratePartitionHoldsTableLock(t *testing.T) {
	s := h36Schemas(t, "part")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct := h36Pool(t, s[0], "")
	if err := pgstore.Migrate(ctx, direct); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, "COMMENT ON TABLE idem_records IS NULL"); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(pgstore.New(direct), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	scoped := runtime.WithScope(ctx, "h36")
	var runs atomic.Int32
	replay := runtime.Call[plainTxReq, string]{Operation: "Pay", Key: "r", Request: plainTxReq{Order: "o", Cents: 1}, Effect: h36Effect(&runs)}
	if _, err := runtime.Do(scoped, rt, replay); err != nil {
		t.Fatal(err)
	}

	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newH36Partition(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), "COMMENT ON TABLE idem_records")
	cfg.ConnConfig.Host = "127.0.0.1"
	cfg.ConnConfig.Port = uint16(proxy.ln.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.RuntimeParams["search_path"] = s[0]
	replica, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	mctx, stop := context.WithTimeout(ctx, 2*time.Second)
	merr := pgstore.Migrate(mctx, replica)
	stop()
	t.Logf("the partitioned replica's Migrate: partition hit %v, err %v", proxy.hit.Load(), merr)

	// Traffic on the other replicas, after the partitioned one gave up.
	for i := range 3 {
		start := time.Now()
		cctx, stop := context.WithTimeout(scoped, 3*time.Second)
		_, err := runtime.Do(cctx, rt, replay)
		if err == nil {
			_, err = runtime.Do(cctx, rt, runtime.Call[plainTxReq, string]{Operation: "Pay", Key: fmt.Sprint("n", i), Request: plainTxReq{Order: "o", Cents: 1}, Effect: h36Effect(&runs)})
		}
		stop()
		if took := time.Since(start); err != nil || took > time.Second {
			var lock string
			_ = direct.QueryRow(ctx, `SELECT coalesce(string_agg(a.state || ' ' || l.mode, ', '), 'none') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.relation = to_regclass('idem_records') AND l.granted AND a.datname = current_database()`).Scan(&lock)
			t.Errorf("call %d beside a Migrate whose client went silent took %v: %v (locks granted on the table: %s)", i, took, err, lock)
		}
	}
}

// Promise (Migrate): "in one transaction under an advisory lock, so
// concurrent starts are safe"; on a marked table it "takes no lock on the
// table". Schedule: the table is current (marked). A replica starts, its
// Migrate takes the advisory lock and reads the mark, and then the replica
// is partitioned (or paused) before its COMMIT reaches the server. The
// server keeps that transaction, and with it the advisory lock, as long as
// it does not hear the client is gone (hours, by default). Every other
// replica's start then waits on pg_advisory_xact_lock, which no
// lock_timeout bounds: with a deadline it fails, without one it hangs;
// traffic is untouched. The test starts a second replica with a 2 s
// deadline and wants its Migrate to succeed on the current table.
func TestH36MigratePartitionBlocksOtherStarts(t *testing.T) {
	s := h36Schemas(t, "part2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct := h36Pool(t, s[0], "")
	if err := pgstore.Migrate(ctx, direct); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newH36Partition(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), "obj_description")
	cfg.ConnConfig.Host = "127.0.0.1"
	cfg.ConnConfig.Port = uint16(proxy.ln.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.RuntimeParams["search_path"] = s[0]
	replica, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	mctx, stop := context.WithTimeout(ctx, 2*time.Second)
	merr := pgstore.Migrate(mctx, replica)
	stop()
	t.Logf("the partitioned replica's Migrate: partition hit %v, err %v", proxy.hit.Load(), merr)

	// The next replica to start, on the current table.
	mctx, stop = context.WithTimeout(ctx, 2*time.Second)
	start := time.Now()
	err = pgstore.Migrate(mctx, direct)
	stop()
	if err != nil {
		t.Errorf("a start's Migrate on the current table, after another replica's went silent, failed after %v: %v", time.Since(start), err)
	}
}
