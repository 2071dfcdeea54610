package redisstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
	"github.com/idemkit/idem/runtime/storetest"
)

// resendHook sends every script twice and keeps the second reply, as
// go-redis does when it resends a command whose reply it did not get (a
// read timeout, a connection broken after the server ran the command): the
// first run is applied, the caller hears only the second.
type resendHook struct{ resent atomic.Int64 }

func (*resendHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !strings.HasPrefix(cmd.Name(), "eval") {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err // NOSCRIPT, or not sent: the caller hears it
		}
		h.resent.Add(1)
		return next(ctx, cmd)
	}
}

func (*resendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestConformanceResentScripts runs the conformance suite on a client that
// sends every script twice (see resendHook): each script must recognise its
// own first run, so that no caller is told a lease was lost, a record is
// someone else's or a release was refused when its own call did the work.
func TestConformanceResentScripts(t *testing.T) {
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	defer c.Close()
	h := new(resendHook)
	c.AddHook(h)
	storetest.Run(t, func(t *testing.T) runtime.Store {
		return newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
	})
	if h.resent.Load() == 0 {
		t.Fatal("no script was resent")
	}
}
