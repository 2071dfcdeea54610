package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Req is the request the simulated operations carry.
type Req struct {
	Account string
	Amount  int64
	// Large asks for a response larger than the store's record limit.
	Large bool `json:",omitempty"`
}

// Receipt is the downstream's answer to an effect.
type Receipt struct {
	ID     string
	Amount int64
	Pad    string `json:",omitempty"`
}

// errStale is the downstream's refusal of a request whose fencing token is
// below one it has already seen for the downstream key.
var errStale = errors.New("downstream: stale fencing token")

// applied is one effect the downstream applied.
type applied struct {
	token   int64
	call    int // the delivery that applied it (-1: unknown)
	receipt Receipt
	at      time.Time
	epoch   int
}

// downstream is the fenced fake downstream: it deduplicates nothing, fences
// by token per downstream key, and its query answers from what it applied.
type downstream struct {
	mu      sync.Mutex
	fence   map[string]int64
	effects map[string][]applied
	n       int
	stale   int
	// lag keeps a new effect invisible to the query (which answers Unknown)
	// for this long; zero once faults stop.
	lag time.Duration
	pad int
}

func newDownstream(lag time.Duration, pad int) *downstream {
	return &downstream{fence: map[string]int64{}, effects: map[string][]applied{}, lag: lag, pad: pad}
}

// admit applies the fence; mu is held.
func (d *downstream) admit(a runtime.Attempt) error {
	if a.FencingToken < d.fence[a.DownstreamKey] {
		d.stale++
		return fmt.Errorf("%w: token %d below %d", errStale, a.FencingToken, d.fence[a.DownstreamKey])
	}
	d.fence[a.DownstreamKey] = a.FencingToken
	return nil
}

// apply runs the effect downstream for the attempt in ctx.
func (d *downstream) apply(ctx context.Context, r Req, call, epoch int) (Receipt, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return Receipt{}, errors.New("downstream: no attempt in context")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.admit(a); err != nil {
		return Receipt{}, err
	}
	d.n++
	rc := Receipt{ID: fmt.Sprintf("rc_%d", d.n), Amount: r.Amount}
	if r.Large {
		rc.Pad = strings.Repeat("x", d.pad)
	}
	d.effects[a.DownstreamKey] = append(d.effects[a.DownstreamKey], applied{token: a.FencingToken, call: call, receipt: rc, at: time.Now(), epoch: epoch})
	return rc, nil
}

// query answers "did the effect of r happen?" for the attempt in ctx.
func (d *downstream) query(ctx context.Context, r Req) (Receipt, runtime.Outcome, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return Receipt{}, runtime.OutcomeUnknown, errors.New("downstream: no attempt in context")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.admit(a); err != nil {
		return Receipt{}, runtime.OutcomeUnknown, err
	}
	effs := d.effects[a.DownstreamKey]
	for i := len(effs) - 1; i >= 0; i-- {
		e := effs[i]
		if e.receipt.Amount != r.Amount {
			continue
		}
		if d.lag > 0 && time.Since(e.at) < d.lag {
			return Receipt{}, runtime.OutcomeUnknown, errors.New("downstream: the effect is not visible yet")
		}
		return e.receipt, runtime.OutcomeSucceeded, nil
	}
	return Receipt{}, runtime.OutcomeNotHappened, nil
}

// happened returns the effects applied for the downstream key.
func (d *downstream) happened(dk string) []applied {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]applied(nil), d.effects[dk]...)
}

func (d *downstream) setLag(lag time.Duration) {
	d.mu.Lock()
	d.lag = lag
	d.mu.Unlock()
}
