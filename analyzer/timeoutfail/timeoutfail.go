// Package timeoutfail defines an analyzer that reports the error of a
// network call reaching a definite-failure action on a path that never
// tells a timeout apart.
package timeoutfail

import (
	"fmt"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "timeoutfail"

// Doc documents the analyzer.
const Doc = `report a timeout of a remote call treated as a definite failure

When a call that may do network I/O (directly or through helpers in any
package) returns an error, the error may be a timeout: the remote side may
have done the work. Reaching a definite-failure action on that error - a
write of a FAILED status (also through a helper given the status, such as
setState(ctx, id, StateFailed), or a struct whose status field it writes,
d.Status = "FAILED" then repo.UpdatePayout(ctx, d)), a rollback of the transaction holding the
intent, a refund, an ORM write of a failed-like state (FAILED, error,
cancelled, reversed, refunded) to a state/status field, an insert of a
refund or reversal entry, a helper named like markPaymentFailed or
releaseReservation (or listed with -failfuncs), deleting the idempotency
token or record (also through a repository interface or an ORM), returning
a permanent failure of the idem runtime (Permanent, ErrPermanent) or
releasing the record (Retryable) - on a path that never tells a timeout
apart, nor asks the remote side what happened (GetChargeStatus) (errors.Is(err, context.DeadlineExceeded), os.IsTimeout, a net.Error's
Timeout(), gRPC codes.DeadlineExceeded/Unavailable, or a helper known to do
one of these) turns "unknown" into "failed": the client retries or the money
is refunded while the charge went through. Record UNKNOWN on a timeout and
let the reconciler ask the remote side what happened.

Suppress with //idemlint:ignore timeoutfail <reason>.`

// Config configures a timeoutfail analyzer.
type Config struct {
	// Facts is the shared facts analyzer; nil means a private one.
	Facts *facts.Facts
	// NetFuncs are added to the facts configuration.
	NetFuncs []string
}

// Analyzer is the default timeoutfail analyzer, using facts.Shared.
var Analyzer = New(Config{Facts: facts.Shared})

// New returns a timeoutfail analyzer for cfg.
func New(cfg Config) *analysis.Analyzer {
	f := cfg.Facts
	if f == nil {
		f = facts.New(facts.Config{})
	}
	f.Config.NetFuncs = append(f.Config.NetFuncs, cfg.NetFuncs...)
	a := &analysis.Analyzer{
		Name:     Name,
		Doc:      Doc,
		URL:      "https://github.com/idemkit/idem/blob/main/docs/idemlint.md#timeoutfail",
		Requires: []*analysis.Analyzer{f.Analyzer},
		Run: func(pass *analysis.Pass) (any, error) {
			res := pass.ResultOf[f.Analyzer].(*facts.Result)
			defer res.Done()
			run(pass, res)
			return nil, nil
		},
	}
	a.Flags.Var(facts.ListFlag(&f.Config.NetFuncs), "netfuncs", "extra network functions, comma-separated")
	a.Flags.Var(facts.ListFlag(&f.Config.FailFuncs), "failfuncs", "extra functions that take a definite-failure action, comma-separated, e.g. (*example.com/pay.Store).MarkLost")
	a.Flags.Var(facts.ListFlag(&f.Config.TokenDels), "tokendels", "extra functions that delete an idempotency token, comma-separated")
	return a
}

func run(pass *analysis.Pass, res *facts.Result) {
	rep := directive.New(pass, Name)
	rep.NoRelated = res.Config().NoRelated
	for _, fn := range res.SSA.SrcFuncs {
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				call, ok := instr.(*ssa.Call)
				if !ok {
					continue
				}
				p := res.NetCall(&call.Call)
				if p == nil || facts.ReadOnlyLeaf(p) {
					continue
				}
				errs := errorValues(call)
				if len(errs) == 0 {
					continue
				}
				check(pass, res, rep, fn, call, p, errs)
			}
		}
	}
}

var errorType = types.Universe.Lookup("error").Type()

// errorValues returns the error result of call and the values derived from
// it (phis, conversions, wrapping calls, variables it is stored in).
func errorValues(call *ssa.Call) map[ssa.Value]bool {
	res := call.Call.Signature().Results()
	if res.Len() == 0 || !types.Identical(res.At(res.Len()-1).Type(), errorType) {
		return nil
	}
	out := map[ssa.Value]bool{}
	var work []ssa.Value
	add := func(v ssa.Value) {
		if v != nil && !out[v] {
			out[v] = true
			work = append(work, v)
		}
	}
	if res.Len() == 1 {
		add(call)
	} else {
		for _, ref := range *call.Referrers() {
			if e, ok := ref.(*ssa.Extract); ok && e.Index == res.Len()-1 {
				add(e)
			}
		}
	}
	for len(work) > 0 {
		v := work[len(work)-1]
		work = work[:len(work)-1]
		refs := v.Referrers()
		if refs == nil {
			continue
		}
		for _, ref := range *refs {
			switch r := ref.(type) {
			case *ssa.Phi, *ssa.ChangeInterface, *ssa.MakeInterface, *ssa.ChangeType:
				add(r.(ssa.Value))
			case *ssa.Store:
				if r.Val != v {
					continue
				}
				switch addr := r.Addr.(type) {
				case *ssa.Alloc:
					for _, l := range *addr.Referrers() {
						if u, ok := l.(*ssa.UnOp); ok && u.Op == token.MUL {
							add(u)
						}
					}
				case *ssa.IndexAddr: // variadic argument of a wrapping call
					if al, ok := addr.X.(*ssa.Alloc); ok {
						for _, l := range *al.Referrers() {
							if sl, ok := l.(*ssa.Slice); ok {
								for _, c := range *sl.Referrers() {
									if wc, ok := c.(*ssa.Call); ok && returnsError(wc) {
										add(wc)
									}
								}
							}
						}
					}
				}
			case *ssa.Call:
				if returnsError(r) {
					for _, a := range r.Call.Args {
						if a == v {
							add(r)
						}
					}
				}
			}
		}
	}
	return out
}

func returnsError(c *ssa.Call) bool {
	res := c.Call.Signature().Results()
	return res.Len() == 1 && types.Identical(res.At(0).Type(), errorType)
}

func isNil(v ssa.Value) bool {
	c, ok := v.(*ssa.Const)
	return ok && c.IsNil()
}

func check(pass *analysis.Pass, res *facts.Result, rep *directive.Reporter, fn *ssa.Function, call *ssa.Call, p *facts.Path, errs map[ssa.Value]bool) {
	fl := res.Flow(fn)
	openAtCall := fl.OpenAt(call)
	hasDeferredRollback := map[int]bool{}
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if d, ok := instr.(*ssa.Defer); ok && res.IsRollback(&d.Call) {
				v, _ := res.TxEnd(&d.Call)
				for _, i := range fl.SitesOf(v) {
					hasDeferredRollback[i] = true
				}
			}
		}
	}
	// Only a transaction that writes holds an intent: rolling back a
	// read-only one loses nothing.
	openAtCall &= writtenSites(res, fl, fn)
	for _, b := range fn.Blocks {
		iff, ok := b.Instrs[len(b.Instrs)-1].(*ssa.If)
		if !ok {
			continue
		}
		cond, ok := iff.Cond.(*ssa.BinOp)
		if !ok || (cond.Op != token.NEQ && cond.Op != token.EQL) {
			continue
		}
		if !(errs[cond.X] && isNil(cond.Y) || errs[cond.Y] && isNil(cond.X)) {
			continue
		}
		s := b.Succs[0]
		if cond.Op == token.EQL {
			s = b.Succs[1]
		}
		for _, fb := range fn.Blocks {
			if !s.Dominates(fb) {
				continue
			}
			for _, instr := range fb.Instrs {
				what := action(res, fl, instr, openAtCall, hasDeferredRollback)
				if what == "" || !reaches(res, call, instr) {
					continue
				}
				report(pass, res, rep, instr, call, p, what)
			}
		}
	}
}

// writtenSites returns the transactions of fl that fn writes through
// (SQL INSERT/UPDATE/DELETE, an Exec with SQL that is not constant, an ORM
// create, save, update or delete).
func writtenSites(res *facts.Result, fl *facts.TxFlow, fn *ssa.Function) uint64 {
	var set uint64
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			ci, ok := instr.(ssa.CallInstruction)
			if !ok {
				continue
			}
			recv := res.TxWrite(ci.Common())
			if recv == nil {
				continue
			}
			for _, i := range fl.SitesOf(recv) {
				set |= 1 << uint(i)
			}
		}
	}
	return set
}

// action describes the definite-failure action taken by instr, or "".
func action(res *facts.Result, fl *facts.TxFlow, instr ssa.Instruction, openAtCall uint64, deferred map[int]bool) string {
	switch in := instr.(type) {
	case *ssa.Call:
		if v, ok := res.TxEnd(&in.Call); ok && res.IsRollback(&in.Call) {
			for _, i := range fl.SitesOf(v) {
				if openAtCall&(1<<uint(i)) != 0 {
					return "rolls back the transaction holding the intent"
				}
			}
			return ""
		}
		if a := res.FailCall(&in.Call); a != nil {
			return a.String()
		}
	case *ssa.Return:
		for _, r := range in.Results {
			if facts.IsIdemPermanent(r) {
				return "returns a permanent failure (the idem runtime's ErrPermanent)"
			}
		}
		open := fl.OpenAt(in) & openAtCall
		for i := range fl.Sites {
			if open&(1<<uint(i)) != 0 && deferred[i] {
				return "returns, so the deferred Rollback undoes the transaction holding the intent"
			}
		}
	}
	return ""
}

// reaches reports whether to is reachable from from on a path that never
// tells a timeout apart.
func reaches(res *facts.Result, from, to ssa.Instruction) bool {
	fb, tb := from.Block(), to.Block()
	after := false
	for _, in := range fb.Instrs {
		if in == from {
			after = true
			continue
		}
		if !after {
			continue
		}
		if in == to {
			return true
		}
		if informed(res, in) {
			return false
		}
	}
	clean := func(b *ssa.BasicBlock) bool {
		for _, in := range b.Instrs {
			if b == tb && in == to {
				return true
			}
			if informed(res, in) {
				return false
			}
		}
		return true
	}
	// succs: b's successors, less the edge on which a gRPC code says the
	// request was refused (that path tells a definite failure apart).
	succs := func(b *ssa.BasicBlock) []*ssa.BasicBlock {
		if i := facts.RefusalEdge(b); i >= 0 {
			return []*ssa.BasicBlock{b.Succs[1-i]}
		}
		return b.Succs
	}
	seen := map[*ssa.BasicBlock]bool{}
	work := append([]*ssa.BasicBlock(nil), succs(fb)...)
	for len(work) > 0 {
		b := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[b] {
			continue
		}
		seen[b] = true
		if !clean(b) {
			continue
		}
		if b == tb {
			return true
		}
		work = append(work, succs(b)...)
	}
	return false
}

// informed: in tells a timeout apart, or asks the downstream whether the
// call happened (GetPaymentStatus, LookupInvoice): what follows is
// informed, not a guess.
func informed(res *facts.Result, in ssa.Instruction) bool {
	if res.IsTimeoutCheck(in) {
		return true
	}
	if c, ok := in.(*ssa.Call); ok {
		return res.IsDownstreamQuery(&c.Call)
	}
	return false
}

func report(pass *analysis.Pass, res *facts.Result, rep *directive.Reporter, at ssa.Instruction, call *ssa.Call, p *facts.Path, what string) {
	pos := at.Pos()
	if !pos.IsValid() {
		return
	}
	chain := ""
	if len(p.Chain) > 1 {
		chain = fmt.Sprintf("; %s, leaf call at %s", p.String(), p.Leaf)
	}
	effect := facts.Effect(p)
	msg := fmt.Sprintf("the error of %s (called at %s%s), a call that may do network I/O (%s), reaches an action at %s that %s without telling a timeout apart: "+
		"after a timeout the remote side may have done the work, so treating it as a failure repeats or undoes %s that happened; "+
		"check errors.Is(err, context.DeadlineExceeded) (or os.IsTimeout, net.Error.Timeout, gRPC DeadlineExceeded) first, "+
		"or ask the remote side what happened, record UNKNOWN and let the reconciler settle it",
		p.Chain[0], res.PosString(rep.Start(call.Pos())), chain, effect, res.PosString(rep.Start(pos)), what, effect)
	d := analysis.Diagnostic{Pos: pos, Message: msg}
	d.Related = append(d.Related, analysis.RelatedInformation{Pos: call.Pos(), Message: "the network call whose error this is: " + p.String()})
	if p.LeafPos.IsValid() && p.LeafPos != call.Pos() {
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: p.LeafPos, Message: "leaf network call: " + p.Chain[len(p.Chain)-1]})
	}
	rep.Report(d)
}
