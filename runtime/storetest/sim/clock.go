package sim

import (
	"sync/atomic"
	"time"
)

// Clock is a store clock that a run can move forward: the process clock plus
// an offset. Build the store on [Clock.Now] (memstore.WithClock(c.Now)) and
// set [Config.Clock] to let the run inject clock jumps.
type Clock struct {
	offset atomic.Int64
}

// NewClock returns a clock that starts at the process clock.
func NewClock() *Clock { return &Clock{} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Jump moves the clock forward by d.
func (c *Clock) Jump(d time.Duration) { c.offset.Add(int64(d)) }
