package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

const pausedChildVar = "IDEM_TEST_PAUSED_CHILD" // the child's work directory

// partitioned is a store whose renewals never answer once the file flag
// exists (the network to the store is cut while the process was stopped).
type partitioned struct {
	runtime.Store
	flag string
}

func (p partitioned) Renew(ctx context.Context, rp runtime.RenewParams) (time.Time, error) {
	if _, err := os.Stat(p.flag); err == nil {
		<-ctx.Done()
		return time.Time{}, ctx.Err()
	}
	return p.Store.Renew(ctx, rp)
}

const pausedLease = time.Second

// TestPausedWorkerStopsItsEffectAtOnce: a worker process is stopped
// (SIGSTOP: a paused VM, a stop-the-world, a debugger) while its effect
// runs, longer than its lease; another worker takes the record over and
// runs the effect; the first is resumed with its store out of reach (its
// renewals never answer). Its first renewal round then starts after the
// lease could have expired: it must try one quick renewal and stop the
// effect within a tenth of the lease, not wait most of a lease for an
// answer while the other worker's effect runs.
func TestPausedWorkerStopsItsEffectAtOnce(t *testing.T) {
	if dir := os.Getenv(pausedChildVar); dir != "" {
		pausedChild(t, dir)
		return
	}
	url := testenv.RedisURL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	defer client.Close()
	prefix := "idemtest-" + teststores.Unique() + ":"
	store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedWorkerStopsItsEffectAtOnce$", "-test.v")
	cmd.Env = append(os.Environ(), pausedChildVar+"="+dir, "IDEM_TEST_PAUSED_PREFIX="+prefix)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	started := filepath.Join(dir, "started")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's effect never started:\n%s", out.String())
		}
	}
	time.Sleep(pausedLease / 2) // a renewal or so
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pausedLease + pausedLease/2) // the child's lease expires
	dup, err := runtime.New(store, runtime.WithOwner("dup"), runtime.WithLease(pausedLease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	dupDone := make(chan error, 1)
	go func() {
		_, err := runtime.Do(pausedCtx(), dup, runtime.Call[string, string]{Operation: "Paused.Op", Key: "k", Request: "r",
			Effect: func(ctx context.Context, _ string) (string, error) {
				select {
				case <-time.After(2 * pausedLease):
					return "dup", nil
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			}})
		dupDone <- err
	}()
	time.Sleep(pausedLease / 5) // the duplicate takes over and runs the effect
	if err := os.WriteFile(filepath.Join(dir, "partitioned"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "stopped"))
	if err != nil {
		t.Fatalf("the child's effect never stopped: %v\n%s", err, out.String())
	}
	stopped, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-dupDone; err != nil {
		t.Fatalf("the duplicate: %v", err)
	}
	// A tenth of the lease (the quick renewal's bound), and three tenths
	// more for a loaded machine's timers; waiting for an answer as an
	// ordinary round does would take nine tenths.
	if ran := stopped.Sub(resumed); ran > pausedLease*2/5 {
		t.Fatalf("the resumed worker's effect ran %v beside the duplicate's before it stopped, want at most %v\n%s",
			ran.Round(time.Millisecond), pausedLease*2/5, out.String())
	} else {
		t.Logf("the resumed worker's effect stopped %v after the resume", ran.Round(time.Millisecond))
	}
}

func pausedCtx() context.Context {
	return runtime.WithScope(context.Background(), "paused")
}

// pausedChild is the worker that is stopped: it runs an effect that
// honours its context and writes when it started and stopped.
func pausedChild(t *testing.T, dir string) {
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	defer client.Close()
	s, err := redisstore.New(client, redisstore.WithPrefix(os.Getenv("IDEM_TEST_PAUSED_PREFIX")))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(partitioned{Store: s, flag: filepath.Join(dir, "partitioned")},
		runtime.WithOwner("paused"), runtime.WithLease(pausedLease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Do(pausedCtx(), rt, runtime.Call[string, string]{Operation: "Paused.Op", Key: "k", Request: "r",
		Effect: func(ctx context.Context, _ string) (string, error) {
			if err := os.WriteFile(filepath.Join(dir, "started"), nil, 0o600); err != nil {
				return "", err
			}
			<-ctx.Done()
			if err := os.WriteFile(filepath.Join(dir, "stopped"), []byte(time.Now().Format(time.RFC3339Nano)), 0o600); err != nil {
				return "", err
			}
			return "", context.Cause(ctx)
		}})
	if err == nil || errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("the paused worker's call: %v, want it stopped", err)
	}
	fmt.Println("paused worker:", err)
}
