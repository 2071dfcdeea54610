package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/idemkit/idem/runtime"
)

// hadFault reports whether an injected fault touched the call: its own, or
// a clock jump or stall while it ran.
func (s *sim) hadFault(c *call) bool {
	if len(c.faulted()) > 0 || c.dead.Load() {
		return true
	}
	c.mu.Lock()
	start, end := c.start, c.end
	c.mu.Unlock()
	if end == 0 {
		return true // never returned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		if start <= w[1] && w[0] <= end {
			return true
		}
	}
	return false
}

// windowExplains reports whether the at-least-once window of an operation
// without a Query explains a FAILED outcome in a life where the effect
// happened: the attempt that applied it had an injected fault, so a takeover
// ran the effect again, unable to know, and that attempt failed.
func (s *sim) windowExplains(id runtime.Identity, e applied) bool {
	if id.Operation != s.ops[opNoQuery] || e.call < 0 || e.call >= len(s.calls) {
		return false
	}
	return s.hadFault(s.calls[e.call])
}

func (s *sim) callDesc(id int) string {
	if id < 0 || id >= len(s.calls) {
		return fmt.Sprintf("call %d", id)
	}
	c := s.calls[id]
	f := c.faulted()
	if c.dead.Load() {
		f = append(f, "dead")
	}
	return fmt.Sprintf("call %d (w%d, plan %s, faults %v)", id, c.plan.worker, c.plan.mode, f)
}

// check evaluates the invariants once the run is over.
func (s *sim) check() Report {
	rep := Report{
		Name: s.cfg.Name, Seed: s.seed, Requests: len(s.requests),
		Faults: map[string]int{}, Outcomes: map[string]int{}, Events: map[string]int{},
	}
	ctx := context.Background()
	s.callsMu.Lock()
	calls := append([]*call(nil), s.calls...)
	s.callsMu.Unlock()
	byID := map[runtime.Identity][]*call{}
	var ids []runtime.Identity
	for _, c := range calls {
		id := s.identity(c.req)
		if byID[id] == nil {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], c)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Operation+ids[i].Key < ids[j].Operation+ids[j].Key })
	codec := s.workers[0].Codec()
	unknownLeft := map[string][]string{}

	for _, id := range ids {
		dk := runtime.DownstreamKey(id)
		effs := s.down.happened(dk)
		rep.Effects += len(effs)
		withQuery := id.Operation == s.ops[opWithQuery]
		lives := map[int][]applied{}
		for _, e := range effs {
			lives[e.epoch] = append(lives[e.epoch], e)
		}
		for life, es := range lives {
			if len(es) < 2 {
				continue
			}
			var list []string
			for _, e := range es {
				list = append(list, fmt.Sprintf("%s token %d by %s", e.receipt.ID, e.token, s.callDesc(e.call)))
			}
			if withQuery {
				s.violate(Violation{Invariant: "at-most-once", Identity: id,
					Detail: fmt.Sprintf("the downstream applied the effect %d times in record life %d although the operation has a Query: %s", len(es), life, strings.Join(list, "; "))})
				continue
			}
			for i := 1; i < len(es); i++ {
				prev := es[i-1]
				if prev.call >= 0 && prev.call < len(calls) && s.hadFault(calls[prev.call]) {
					rep.Window++
					continue
				}
				s.violate(Violation{Invariant: "at-least-once window", Identity: id,
					Detail: fmt.Sprintf("the effect ran again (%s) after %s applied it with no injected fault to explain why its outcome was not recorded: %s", es[i].receipt.ID, s.callDesc(prev.call), strings.Join(list, "; "))})
			}
		}
		receipts := map[Receipt]applied{}
		for _, e := range effs {
			receipts[e.receipt] = e
		}
		for _, c := range byID[id] {
			s.checkCall(id, c, effs, receipts, codec)
		}

		rec, err := s.cfg.Store.Get(ctx, id)
		switch {
		case errors.Is(err, runtime.ErrNotFound):
		case err != nil:
			s.t.Errorf("sim %s seed %d: reading %v at the end: %v", s.cfg.Name, s.seed, id, err)
		case rec.State == runtime.StateProcessing:
			s.violate(Violation{Invariant: "convergence", Identity: id,
				Detail: fmt.Sprintf("the record is left PROCESSING (owner %q, version %d, lease live %v, takeovers %d) after every lease expired, the reconciler ran to quiescence and a healthy client retried", rec.Owner, rec.Version, rec.LeaseLive(), rec.Takeovers)})
		case rec.State == runtime.StateUnknown:
			happened := len(effs) > 0
			unknownLeft[id.Operation] = append(unknownLeft[id.Operation], fmt.Sprintf("%q (version %d, attempts %d, effect happened %v)", id.Key, rec.Version, rec.Attempts, happened))
		case rec.State == runtime.StateSuccess:
			var stored Receipt
			var req Req
			uerr := codec.Unmarshal(rec.Response, &stored)
			_ = codec.Unmarshal(rec.Request, &req)
			e, ok := receipts[stored]
			switch {
			case uerr == nil && ok && e.receipt.Amount == req.Amount:
			case req.Large: // may be stored as "response not stored"
			default:
				s.violate(Violation{Invariant: "stored response", Identity: id,
					Detail: fmt.Sprintf("the SUCCESS record (version %d, request amount %d) holds %+v (%v), which the downstream never produced for that request", rec.Version, req.Amount, stored, uerr)})
			}
		case rec.State == runtime.StateFailed:
			life := s.rec.lifeOf(id, rec.Version)
			for _, e := range effs {
				if e.epoch == life && !s.windowExplains(id, e) {
					s.violate(Violation{Invariant: "no FAILED for an effect that happened", Identity: id,
						Detail: fmt.Sprintf("the record is FAILED (version %d, life %d) but the downstream applied the effect in that life (%s, token %d, by %s)", rec.Version, life, e.receipt.ID, e.token, s.callDesc(e.call))})
					break
				}
			}
		}
	}
	s.mu.Lock()
	gaveUp := map[string]int{}
	for k, v := range s.gaveUp {
		gaveUp[k] = v
	}
	s.mu.Unlock()
	for op, left := range unknownLeft {
		if len(left) > gaveUp[op] {
			sort.Strings(left)
			key := strings.SplitN(left[0], " ", 2)[0]
			id := runtime.Identity{Scope: s.scope, Operation: op, Key: strings.Trim(key, `"`)}
			s.violate(Violation{Invariant: "convergence", Identity: id,
				Detail: fmt.Sprintf("%d records of %s are left UNKNOWN after quiescence (the query knows everything by then) but only %d were reported with EventReconcileGaveUp (reconciler MaxAttempts %d): %s",
					len(left), op, gaveUp[op], s.cfg.MaxAttempts, strings.Join(left, ", "))})
		}
	}

	bad, checked, skipped, undecided := s.rec.linearizability(20 * time.Second)
	rep.Checked, rep.Skipped, rep.Undecided = checked, skipped, undecided
	for id, d := range bad {
		s.violate(Violation{Invariant: "linearizability", Identity: id, Detail: "the store's history of this identity is not linearizable against the record model: " + d, Events: []string{}})
	}
	if undecided > 0 {
		s.t.Logf("sim %s seed %d: linearizability undecided (checker timeout) for %d identities", s.cfg.Name, s.seed, undecided)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.counts {
		rep.Faults[k] = v
	}
	for k, v := range s.outcomes {
		rep.Outcomes[k] = v
	}
	for k, v := range s.events {
		rep.Events[k] = v
	}
	rep.Violations = append(rep.Violations, s.violations...)
	rep.Stall = s.stall
	kept, excused := stallExcused(s.stallable, s.stall, s.cfg.Lease, s.cfg.NoStallExcuses)
	rep.Violations = append(rep.Violations, kept...)
	rep.Excused = excused
	rep.StoreOps = s.rec.storeOps
	s.down.mu.Lock()
	rep.Stale = s.down.stale
	s.down.mu.Unlock()
	return rep
}

// checkCall checks what one client was told.
func (s *sim) checkCall(id runtime.Identity, c *call, effs []applied, receipts map[Receipt]applied, codec runtime.Codec) {
	c.mu.Lock()
	resp, err, applied := c.resp, c.err, c.applied
	recorded, hasRecorded, recordAnswered := c.recorded, c.hasRecorded, c.recordAnswered
	firstForeign, anyForeign := c.firstForeign, c.anyForeign
	ended := c.end != 0
	c.mu.Unlock()
	if !ended {
		return // a dead worker's call
	}
	desc := s.callDesc(c.id)
	switch {
	case err == nil:
		e, ok := receipts[resp]
		switch {
		case !ok:
			s.violate(Violation{Invariant: "client success", Identity: id,
				Detail: fmt.Sprintf("%s was told success with %s (amount %d), which the downstream never produced", desc, resp.ID, resp.Amount)})
		case e.receipt.Amount != c.req.req.Amount:
			s.violate(Violation{Invariant: "key reuse", Identity: id,
				Detail: fmt.Sprintf("%s (amount %d) was told success with %s, the response to another request (amount %d) under the same key: want ErrKeyReused", desc, c.req.req.Amount, resp.ID, e.receipt.Amount)})
		}
	case errors.Is(err, runtime.ErrNotRecorded):
		// "Use the response: the effect happened": the effect's, or the
		// one the query found.
		e, ok := receipts[resp]
		switch {
		case !ok:
			s.violate(Violation{Invariant: "not-recorded success carries the response", Identity: id,
				Detail: fmt.Sprintf("%s was told the effect succeeded but its outcome was not recorded (%v), with %q (amount %d), which the downstream never produced", desc, err, resp.ID, resp.Amount)})
		case e.receipt.Amount != c.req.req.Amount:
			s.violate(Violation{Invariant: "key reuse", Identity: id,
				Detail: fmt.Sprintf("%s (amount %d) was told its effect succeeded (not recorded) with %s, the response to another request (amount %d) under the same key", desc, c.req.req.Amount, resp.ID, e.receipt.Amount)})
		}
	case errors.Is(err, runtime.ErrPermanent):
		life := int(c.life.Load())
		for _, e := range effs {
			if e.epoch == life && !s.windowExplains(id, e) {
				s.violate(Violation{Invariant: "no FAILED for an effect that happened", Identity: id,
					Detail: fmt.Sprintf("%s was told FAILED (%v) but the downstream applied the effect in that record life (%s, token %d, by %s)", desc, err, e.receipt.ID, e.token, s.callDesc(e.call))})
				break
			}
		}
	}
	if firstForeign && !errors.Is(err, runtime.ErrKeyReused) {
		s.violate(Violation{Invariant: "key reuse", Identity: id,
			Detail: fmt.Sprintf("%s found the key held with another fingerprint but got %v, want ErrKeyReused", desc, err)})
	}
	if errors.Is(err, runtime.ErrKeyReused) && !anyForeign {
		s.violate(Violation{Invariant: "key reuse", Identity: id,
			Detail: fmt.Sprintf("%s got ErrKeyReused but every record it saw had its own fingerprint", desc)})
	}
	if hasRecorded {
		var stored Receipt
		uerr := codec.Unmarshal(recorded, &stored)
		// A write the store applied but never answered as done in time
		// (its answer came after the completion deadline) leaves the
		// runtime unable to know: ErrNotRecorded with the effect's
		// response is then its documented answer.
		unseen := !recordAnswered && errors.Is(err, runtime.ErrNotRecorded)
		if (err != nil && !unseen) || (!c.req.req.Large && (uerr != nil || stored != resp)) {
			s.violate(Violation{Invariant: "recorded success returned", Identity: id,
				Detail: fmt.Sprintf("%s recorded SUCCESS (%s) in the store itself, but its client got %q, %v", desc, stored.ID, resp.ID, err)})
		}
	}
	if applied != nil && c.plan.mode == modeOK && !s.hadFault(c) && !errors.Is(err, runtime.ErrLeaseLost) {
		if err != nil || resp != *applied {
			s.violate(Violation{Invariant: "fault-free success", Identity: id,
				Detail: fmt.Sprintf("%s had no fault injected and its effect succeeded (%s, response %d bytes), but its client got %q, %v", desc, applied.ID, len(applied.Pad), resp.ID, err)})
		}
	}
}

// stallExcused splits breaches a stall may explain into those that stand
// and those a measured stall of the process excuses: one past the lease
// rule's margin (a tenth of the lease), unless noExcuses.
func stallExcused(vs []Violation, stall, lease time.Duration, noExcuses bool) (kept, excused []Violation) {
	if noExcuses || stall < lease/10 {
		return vs, nil
	}
	return nil, vs
}
