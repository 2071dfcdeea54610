package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// quietLogger drops go-redis's own log lines (one per failed dial while the
// server is down); the tests check the errors the calls return instead.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }

// redisServer is a redis-server process the test owns, with an append-only
// file fsynced on every write, so that it can be killed and restarted with
// its records.
type redisServer struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server not found (scripts/test.sh installs it): %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: port}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--daemonize", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for range 100 {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.t.Fatalf("redis-server on %s did not start:\n%s", s.addr(), log)
}

// kill stops the server the hard way (SIGKILL): what survives is what the
// append-only file holds.
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// TestFailover kills the Redis server while workers run calls, checks that
// calls fail closed with a clear store error while it is down, restarts it
// and checks that no record was lost, corrupted or duplicated and that no
// effect ran twice. A claim applied whose caller is gone holds its key until
// its lease ends, as documented, and is then taken over.
func TestFailover(t *testing.T) {
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1, PoolSize: 16})
	defer c.Close()
	s := newStore(t, c)
	// The lease outlasts the outage: a completion retrying through it keeps
	// the record (its renewals resume when the server is back). With a lease
	// shorter than the outage a takeover, and so a second run of an effect
	// without a query, would be legitimate.
	rt, err := runtime.New(s, runtime.WithLease(10*time.Second), runtime.WithMaxWait(3*time.Second),
		runtime.WithCompletionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "failover")

	var mu sync.Mutex
	runs := make(map[string]int)
	call := func(key string, effect func()) runtime.Call[string, string] {
		return runtime.Call[string, string]{Operation: "T.Failover", Key: key, Request: "req-" + key,
			Effect: func(ctx context.Context, req string) (string, error) {
				mu.Lock()
				runs[key]++
				mu.Unlock()
				if effect != nil {
					effect()
				}
				return "resp-" + key, nil
			}}
	}
	do := func(key string) error {
		got, err := runtime.Do(ctx, rt, call(key, nil))
		if err == nil && got != "resp-"+key {
			return fmt.Errorf("%s: response %q", key, got)
		}
		return err
	}

	// Phase 1, server up: finished records and one call in flight.
	finishedVersion := map[string]int64{}
	for i := range 20 {
		k := fmt.Sprint("a", i)
		if err := do(k); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(ctx, runtime.Identity{Scope: "failover", Operation: "T.Failover", Key: k})
		if err != nil {
			t.Fatal(err)
		}
		finishedVersion[k] = rec.Version
	}
	started, release := make(chan struct{}), make(chan struct{})
	inflight := make(chan error, 1)
	go func() {
		got, err := runtime.Do(ctx, rt, call("inflight", func() { close(started); <-release }))
		if err == nil && got != "resp-inflight" {
			err = fmt.Errorf("inflight: response %q", got)
		}
		inflight <- err
	}()
	<-started

	// Background load over the whole outage: errors are expected while the
	// server is down; what matters is the state afterwards.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loadOK, loadErr atomic.Int32
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := do(fmt.Sprint("c", r.IntN(60))); err != nil {
					loadErr.Add(1)
					time.Sleep(10 * time.Millisecond)
				} else {
					loadOK.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)

	// A claim applied whose caller is gone (as when the kill below cuts a
	// claim's reply): the key stays held until its lease ends.
	orphanID := runtime.Identity{Scope: "failover", Operation: "T.Failover", Key: "orphan"}
	fp, body, err := runtime.EncodeRequest(rt, "req-orphan", nil)
	if err != nil {
		t.Fatal(err)
	}
	const orphanLease = 10 * time.Second
	// The lease starts when Redis applies the claim, after this instant: the
	// key may be free at the check below only if orphanLease has passed
	// since (a loaded machine can stretch the outage that long).
	orphanSent := time.Now()
	if res, err := s.Claim(ctx, runtime.ClaimParams{ID: orphanID, Fingerprint: fp, Request: body, Owner: "gone", Lease: orphanLease}); err != nil || !res.Claimed {
		t.Fatalf("orphan claim: %+v, %v", res, err)
	}

	// Phase 2: the server dies. The in-flight effect finishes meanwhile; its
	// completion keeps retrying.
	srv.kill()
	close(release)
	for i := range 5 {
		key := fmt.Sprint("b", i)
		start := time.Now()
		err := do(key)
		if err == nil {
			t.Fatalf("%s: Do succeeded while Redis was down", key)
		}
		if !strings.Contains(err.Error(), "redisstore: claim:") || errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("%s: error while down = %v, want a redisstore claim error", key, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: failing took %v", key, d)
		}
		// A replay cannot be served either: fail closed, never run again.
		if err := do("a0"); err == nil || !strings.Contains(err.Error(), "redisstore:") {
			t.Fatalf("replay while down: %v, want a store error", err)
		}
	}
	id := runtime.Identity{Scope: "failover", Operation: "T.Failover", Key: "a1"}
	if _, err := s.Get(ctx, id); err == nil || errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Get while down = %v, want a store error (not ErrNotFound)", err)
	}
	if _, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "r", Lease: time.Second, Limit: 10}); err == nil {
		t.Fatal("AcquirePending succeeded while Redis was down")
	}
	if _, err := s.Sweep(ctx, 10); err == nil {
		t.Fatal("Sweep succeeded while Redis was down")
	}
	mu.Lock()
	for i := range 5 {
		if n := runs[fmt.Sprint("b", i)]; n != 0 {
			t.Errorf("b%d: effect ran %d times while Redis was down", i, n)
		}
	}
	mu.Unlock()
	time.Sleep(500 * time.Millisecond)

	// Phase 3: the server comes back with its append-only file.
	srv.start()
	select {
	case err := <-inflight:
		if err != nil {
			t.Fatalf("in-flight call across the outage: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("in-flight call did not finish after the restart")
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("background calls: %d succeeded, %d failed", loadOK.Load(), loadErr.Load())
	if loadOK.Load() == 0 {
		t.Fatal("no background call succeeded")
	}

	// Every identity converges to exactly one SUCCESS record whose effect ran
	// once, and replays need no effect.
	keys := []string{"inflight", "orphan"}
	for i := range 20 {
		keys = append(keys, fmt.Sprint("a", i))
	}
	for i := range 5 {
		keys = append(keys, fmt.Sprint("b", i))
	}
	for i := range 60 {
		keys = append(keys, fmt.Sprint("c", i))
	}
	// A claim Redis applied (and logged) just before it was killed, or
	// whose reply the outage cut, has no caller left: as documented, it
	// holds its key until its lease ends, and duplicates are told
	// ErrInProgress until then. The check therefore waits past the lease,
	// and only for such keys: the effect of each still ran once.
	settle, err := runtime.New(s, runtime.WithLease(10*time.Second), runtime.WithMaxWait(12*time.Second),
		runtime.WithCompletionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	orphans := 0
	for _, k := range keys {
		err := do(k)
		if k == "orphan" && !errors.Is(err, runtime.ErrInProgress) {
			// Free: its lease must have ended (measured after the call, so
			// a lease that ended during it counts).
			if d := time.Since(orphanSent); d < orphanLease {
				t.Fatalf("the orphan claim's key was free %v after the claim, before its %v lease could end (err %v)", d, orphanLease, err)
			}
			t.Logf("after restart, orphan: its lease had ended (%v after the claim); taken over", time.Since(orphanSent))
		}
		if errors.Is(err, runtime.ErrInProgress) {
			orphans++
			t.Logf("after restart, %s: %v; waiting for its lease to end", k, err)
			var got string
			got, err = runtime.Do(ctx, settle, call(k, nil))
			if err == nil && got != "resp-"+k {
				err = fmt.Errorf("response %q", got)
			}
		}
		if err != nil {
			t.Fatalf("after restart, %s: %v", k, err)
		}
	}
	t.Logf("%d keys held by a claim left without its caller", orphans)
	mu.Lock()
	for _, k := range keys {
		if runs[k] != 1 {
			t.Errorf("%s: effect ran %d times, want 1", k, runs[k])
		}
	}
	mu.Unlock()
	for _, k := range keys {
		rec, err := s.Get(ctx, runtime.Identity{Scope: "failover", Operation: "T.Failover", Key: k})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if rec.State != runtime.StateSuccess || string(rec.Response) != `"resp-`+k+`"` || string(rec.Request) != `"req-`+k+`"` || rec.Version < 2 {
			t.Errorf("%s: record after the outage = %+v", k, rec)
		}
		if v, ok := finishedVersion[k]; ok && rec.Version != v {
			t.Errorf("%s: finished before the outage at version %d, version now %d", k, v, rec.Version)
		}
	}
	n, err := redisstore.CheckIndexes(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(keys) {
		t.Fatalf("%d records in Redis, want %d (one per identity)", n, len(keys))
	}
}
