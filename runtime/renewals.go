package runtime

import (
	"container/heap"
	"sync"
	"time"
)

// renewals schedules the lease renewal rounds of a runtime's calls in
// flight with one timer: a call registers its heartbeat when its lease is
// granted and removes it when it ends, so a call that ends before its
// first renewal is due (a third of the lease) arms no timer of its own and
// runs no goroutine. When the earliest round is due, the timer starts it
// in its own goroutine (a round waits on the store), exactly when a
// per-call timer would have.
type renewals struct {
	mu  sync.Mutex
	due dueHeap
	// timer fires at `at` (zero when it is not armed). It stays armed when
	// the heartbeat it was armed for leaves, so that calls that come and
	// go within a third of a lease reset no timer.
	timer *time.Timer
	at    time.Time
}

// schedule runs h's next renewal round at due, unless h was stopped.
func (s *renewals) schedule(h *heartbeat, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.stopped.Load() {
		return
	}
	h.due = due
	if h.index >= 0 {
		heap.Fix(&s.due, int(h.index))
	} else {
		heap.Push(&s.due, h)
	}
	s.arm()
}

// unschedule removes h; a round already started is not affected.
func (s *renewals) unschedule(h *heartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.index >= 0 {
		heap.Remove(&s.due, int(h.index))
	}
}

// arm makes the timer fire by the earliest due round; s.mu is held.
func (s *renewals) arm() {
	if len(s.due) == 0 {
		return
	}
	next := s.due[0].due
	if !s.at.IsZero() && !next.Before(s.at) {
		return
	}
	s.at = next
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(next), s.fire)
	} else {
		s.timer.Reset(time.Until(next))
	}
}

// fire starts every round that is due.
func (s *renewals) fire() {
	s.mu.Lock()
	s.at = time.Time{}
	now := time.Now()
	var run []*heartbeat
	for len(s.due) > 0 && !s.due[0].due.After(now) {
		run = append(run, heap.Pop(&s.due).(*heartbeat))
	}
	s.arm()
	s.mu.Unlock()
	for _, h := range run {
		go h.round()
	}
}

// dueHeap is a min-heap of heartbeats by due time (container/heap).
type dueHeap []*heartbeat

func (q dueHeap) Len() int           { return len(q) }
func (q dueHeap) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q dueHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = int32(i), int32(j)
}

func (q *dueHeap) Push(x any) {
	h := x.(*heartbeat)
	h.index = int32(len(*q))
	*q = append(*q, h)
}

func (q *dueHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
