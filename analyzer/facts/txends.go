package facts

import (
	"fmt"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Ends is how a helper ends the transactions it is given, per path: the
// parameters (SSA indexes, receiver first) it commits or rolls back
// before every normal return, those it ends exactly on the returns whose
// error result is not nil (a rollback on error), and those it ends
// exactly when an error it is given is set, or exactly when it is nil
// (RollbackIfErr(tx, err), CommitIfOK(tx, err)). A parameter ended only
// on paths that panic or exit (PanicIfErrorWithRollback(err, tx)) is in
// none: when the helper returns, the transaction is still open.
type Ends struct {
	Always []int
	OnErr  []int
	OnArg  []ArgEnd
}

// ArgEnd: the helper ends its parameter Tx exactly on the paths where its
// error parameter Err is not nil (or, with Nil, where it is nil).
type ArgEnd struct {
	Tx, Err int
	Nil     bool
}

func (e Ends) empty() bool { return len(e.Always) == 0 && len(e.OnErr) == 0 && len(e.OnArg) == 0 }

func (e Ends) equal(o Ends) bool {
	return slices.Equal(e.Always, o.Always) && slices.Equal(e.OnErr, o.OnErr) && slices.Equal(e.OnArg, o.OnArg)
}

// txParams returns the bit set of fn's parameters that are transactions,
// gorm/pop handles, or structs (or pointers to them) with such a field.
func (r *Result) txParams(fn *ssa.Function) uint64 {
	var set uint64
	for i, p := range fn.Params {
		if i >= 64 {
			break
		}
		if r.TxOrConn(p.Type()) || r.holdsTx(p.Type()) {
			set |= 1 << uint(i)
		}
	}
	return set
}

// holdsTx: t is a struct, or a pointer to one, with a transaction field.
func (r *Result) holdsTx(t types.Type) bool {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	st, ok := t.Underlying().(*types.Struct)
	if !ok {
		return false
	}
	for i := 0; i < st.NumFields(); i++ {
		if r.TxOrConn(st.Field(i).Type()) {
			return true
		}
	}
	return false
}

// paramOf resolves v to the index of fn's parameter it is, or whose field
// (at any depth of fields) it is, or -1.
func paramOf(fn *ssa.Function, v ssa.Value) int {
	for depth := 0; depth < 4; depth++ {
		v = unwrap(v)
		switch x := v.(type) {
		case *ssa.Parameter:
			return paramIndex(fn, x)
		case *ssa.UnOp:
			fa, ok := x.X.(*ssa.FieldAddr)
			if !ok || x.Op != token.MUL {
				return -1
			}
			v = fa.X
		case *ssa.FieldAddr:
			v = x.X
		case *ssa.Field:
			v = x.X
		default:
			return -1
		}
	}
	return -1
}

// endRet is what a return of a helper sees: which parameters may be
// ended there, and whether its error result is a nil constant.
type endRet struct {
	ended  uint64
	nilErr bool
	hasErr bool
}

// argAssume restricts a helper's paths to those where its error
// parameter param is nil (isNil) or not; param -1 assumes nothing.
type argAssume struct {
	param int
	isNil bool
}

// endsOf computes how fn ends its transaction parameters (see [Ends]): a
// may-be-ended analysis over fn's CFG (a Commit or Rollback of a parameter,
// deferred or not, or a call of a helper that ends it), read at each
// return that a call that does not return does not precede; a parameter
// ended on some returns only is told apart by the helper's error result,
// or else by an error parameter, the analysis run again on the paths
// where it is nil and on those where it is not.
func (r *Result) endsOf(fn *ssa.Function) Ends {
	params := r.txParams(fn)
	if params == 0 || len(fn.Blocks) == 0 {
		return Ends{}
	}
	rets := r.endPaths(fn, params, argAssume{param: -1})
	var e Ends
	var split []int
	for i := range fn.Params {
		if i >= 64 || params&(1<<uint(i)) == 0 {
			continue
		}
		bit := uint64(1) << uint(i)
		any, open, onErr := false, false, true
		for _, x := range rets {
			ended := x.ended&bit != 0
			any = any || ended
			open = open || !ended
			if !x.hasErr || ended == x.nilErr {
				onErr = false
			}
		}
		onErr = onErr && open
		switch {
		case !any:
			// never ended when it returns: ended only where it panics
			// or exits, or not at all
		case onErr:
			e.OnErr = append(e.OnErr, i)
		default:
			// ended on every return (as far as a may-be-ended analysis
			// tells, paths joining before it returns), or on some
			split = append(split, i)
		}
	}
	for _, i := range split {
		if a, ok := r.endsOnArg(fn, params, i); ok {
			e.OnArg = append(e.OnArg, a)
		} else {
			// on every path, or on some not told apart: ended at the
			// call (precision first)
			e.Always = append(e.Always, i)
		}
	}
	slices.Sort(e.Always)
	return e
}

// endsOnArg finds an error parameter of fn that tells apart the returns
// where fn ends its parameter tx: every return ends it on the paths where
// that error is not nil (or nil) and none on the others.
func (r *Result) endsOnArg(fn *ssa.Function, params uint64, tx int) (ArgEnd, bool) {
	bit := uint64(1) << uint(tx)
	// every: each reachable return ends tx (and there is one); none: none does
	judge := func(rets []endRet) (every, none bool) {
		every, none = len(rets) > 0, true
		for _, x := range rets {
			if x.ended&bit != 0 {
				none = false
			} else {
				every = false
			}
		}
		return every, none
	}
	for j, p := range fn.Params {
		if !types.Identical(p.Type(), errorType) {
			continue
		}
		evNil, noNil := judge(r.endPaths(fn, params, argAssume{j, true}))
		evSet, noSet := judge(r.endPaths(fn, params, argAssume{j, false}))
		switch {
		case evSet && noNil:
			return ArgEnd{Tx: tx, Err: j}, true
		case evNil && noSet:
			return ArgEnd{Tx: tx, Err: j, Nil: true}, true
		}
	}
	return ArgEnd{}, false
}

// nilTest: b ends in a branch comparing v with nil; it returns v and the
// successor taken when v is nil, or nil.
func nilTest(b *ssa.BasicBlock) (ssa.Value, *ssa.BasicBlock) {
	if len(b.Instrs) == 0 || len(b.Succs) != 2 {
		return nil, nil
	}
	iff, ok := b.Instrs[len(b.Instrs)-1].(*ssa.If)
	if !ok {
		return nil, nil
	}
	cond, ok := iff.Cond.(*ssa.BinOp)
	if !ok || (cond.Op != token.NEQ && cond.Op != token.EQL) {
		return nil, nil
	}
	x, y := cond.X, cond.Y
	if c, ok := x.(*ssa.Const); ok && c.IsNil() {
		x, y = y, x
	}
	if c, ok := y.(*ssa.Const); !ok || !c.IsNil() {
		return nil, nil
	}
	if cond.Op == token.EQL {
		return x, b.Succs[0]
	}
	return x, b.Succs[1]
}

// endPaths runs the may-be-ended analysis of fn's transaction parameters
// (params) on the paths that assume allows, and reads it at each return
// reached.
func (r *Result) endPaths(fn *ssa.Function, params uint64, assume argAssume) []endRet {
	// known: whether v is assumed nil (ok false: not known)
	known := func(v ssa.Value) (isNil, ok bool) {
		if c, isConst := v.(*ssa.Const); isConst && c.IsNil() {
			return true, true
		}
		if assume.param >= 0 && unwrap(v) == fn.Params[assume.param] {
			return assume.isNil, true
		}
		return false, false
	}
	gen := func(st uint64, instr ssa.Instruction) uint64 {
		var c *ssa.CallCommon
		deferred := false
		switch in := instr.(type) {
		case *ssa.Call:
			c = &in.Call
		case *ssa.Defer:
			c, deferred = &in.Call, true
		default:
			return st
		}
		mark := func(v ssa.Value) {
			if i := paramOf(fn, v); i >= 0 && i < 64 && params&(1<<uint(i)) != 0 {
				st |= 1 << uint(i)
			}
		}
		if v, ok := r.TxEnd(c); ok {
			mark(v)
			return st
		}
		e := r.closesParams(c)
		for _, k := range e.Always {
			if k < len(c.Args) {
				mark(c.Args[k])
			}
		}
		if call, ok := instr.(*ssa.Call); ok && !deferred && !errTested(call) {
			for _, k := range e.OnErr {
				if k < len(c.Args) {
					mark(c.Args[k])
				}
			}
		}
		for _, a := range e.OnArg {
			if a.Tx >= len(c.Args) || a.Err >= len(c.Args) {
				continue
			}
			if isNil, ok := known(c.Args[a.Err]); !ok || isNil == a.Nil {
				mark(c.Args[a.Tx]) // ended, or not told (precision first)
			}
		}
		return st
	}
	feasible := func(b, succ *ssa.BasicBlock) bool {
		v, nilSucc := nilTest(b)
		if v == nil {
			return true
		}
		isNil, ok := known(v)
		return !ok || isNil == (succ == nilSucc)
	}
	out := func(b *ssa.BasicBlock, in uint64, succ *ssa.BasicBlock) uint64 {
		st := in
		for _, instr := range b.Instrs {
			if r.noReturn(instr) {
				return 0
			}
			st = gen(st, instr)
		}
		if succ != nil {
			if call, onErrEdge := r.endErrEdge(b, succ); call != nil && onErrEdge {
				for _, k := range r.closesParams(&call.Call).OnErr {
					if k < len(call.Call.Args) {
						if i := paramOf(fn, call.Call.Args[k]); i >= 0 && i < 64 {
							st |= 1 << uint(i)
						}
					}
				}
			}
		}
		return st
	}
	in := map[*ssa.BasicBlock]uint64{}
	reach := map[*ssa.BasicBlock]bool{fn.Blocks[0]: true}
	if fn.Recover != nil {
		reach[fn.Recover] = true
	}
	for changed := true; changed; {
		changed = false
		for _, b := range fn.Blocks {
			var v uint64
			for _, p := range b.Preds {
				if !reach[p] || !feasible(p, b) {
					continue
				}
				if !reach[b] {
					reach[b], changed = true, true
				}
				v |= out(p, in[p], b)
			}
			if v|in[b] != in[b] {
				in[b] |= v
				changed = true
			}
		}
	}
	var rets []endRet
	for _, b := range fn.Blocks {
		r0, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return)
		if !ok || !reach[b] || slices.ContainsFunc(b.Instrs, r.noReturn) {
			continue
		}
		x := endRet{ended: out(b, in[b], nil)}
		if n := len(r0.Results); n > 0 && types.Identical(r0.Results[n-1].Type(), errorType) {
			x.hasErr = true
			if c, ok := r0.Results[n-1].(*ssa.Const); ok && c.IsNil() {
				x.nilErr = true
			}
		}
		rets = append(rets, x)
	}
	return rets
}

// noReturn: instr is a call that does not return: os.Exit, log.Fatal*
// and log.Panic*, a function or method named Fatal*, or Panic*, that
// returns nothing (a logger's: klog.Fatalf, logrus.Panic, zap's
// Logger.Fatal), or a function seen never to return (every path panics or
// exits), in this package or through a [NoReturn] fact.
func (r *Result) noReturn(instr ssa.Instruction) bool {
	call, ok := instr.(*ssa.Call)
	if !ok {
		return false
	}
	fn := CalleeObj(&call.Call)
	if fn == nil {
		return false
	}
	switch p, n := rulekit.PkgPath(fn), fn.Name(); {
	case p == "os" && n == "Exit":
		return true
	case strings.HasPrefix(n, "Fatal") || strings.HasPrefix(n, "Panic"):
		switch strings.TrimPrefix(strings.TrimPrefix(n, "Fatal"), "Panic") {
		case "", "f", "ln":
			if fn.Type().(*types.Signature).Results().Len() == 0 {
				return true
			}
		}
	}
	if call.Call.IsInvoke() {
		return false
	}
	sf := StaticFn(&call.Call)
	if sf == nil {
		return false
	}
	if s := r.local(sf); s != nil {
		return s.NoReturn
	}
	var f NoReturn
	return r.Pass.ImportObjectFact(fn, &f)
}

// neverReturns: fn has a body and no return of it is reached from its
// entry but through a call that does not return (every path panics,
// exits or loops forever).
func (r *Result) neverReturns(fn *ssa.Function) bool {
	if len(fn.Blocks) == 0 {
		return false
	}
	seen := map[*ssa.BasicBlock]bool{fn.Blocks[0]: true}
	work := []*ssa.BasicBlock{fn.Blocks[0]}
	for len(work) > 0 {
		b := work[len(work)-1]
		work = work[:len(work)-1]
		if slices.ContainsFunc(b.Instrs, r.noReturn) {
			continue
		}
		if _, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return); ok {
			return false
		}
		for _, s := range b.Succs {
			if !seen[s] {
				seen[s] = true
				work = append(work, s)
			}
		}
	}
	return true
}

// errResult returns the value of call's error result (the call itself,
// or the Extract of its last result), or nil.
func errResult(call *ssa.Call) ssa.Value {
	res := call.Call.Signature().Results()
	switch {
	case res.Len() == 1 && types.Identical(res.At(0).Type(), errorType):
		return call
	case res.Len() > 1 && types.Identical(res.At(res.Len()-1).Type(), errorType):
		for _, ref := range *call.Referrers() {
			if e, ok := ref.(*ssa.Extract); ok && e.Index == res.Len()-1 {
				return e
			}
		}
	}
	return nil
}

// errTested: call's error result is compared with nil by a branch.
func errTested(call *ssa.Call) bool {
	v := errResult(call)
	if v == nil {
		return false
	}
	for _, ref := range *v.Referrers() {
		if bo, ok := ref.(*ssa.BinOp); ok && (bo.Op == token.NEQ || bo.Op == token.EQL) {
			for _, r2 := range *bo.Referrers() {
				if _, ok := r2.(*ssa.If); ok {
					return true
				}
			}
		}
	}
	return false
}

// endErrEdge: b ends in a branch on whether the error result of a call is
// nil; it returns the call and whether the edge to succ is the one where
// the error is not nil.
func (r *Result) endErrEdge(b, succ *ssa.BasicBlock) (*ssa.Call, bool) {
	x, nilSucc := nilTest(b)
	var call *ssa.Call
	switch v := x.(type) {
	case *ssa.Call:
		call = v
	case *ssa.Extract:
		call, _ = v.Tuple.(*ssa.Call)
	}
	if call == nil || errResult(call) != x {
		return nil, false
	}
	return call, succ != nilSucc
}

// closesParams returns how the callee of c ends the transactions given
// as its arguments (indexes in c.Args): from this package's summaries,
// a ClosesTx fact, or, through an interface, what every implementation
// in the program does (the command only).
func (r *Result) closesParams(c *ssa.CallCommon) Ends {
	if it := ifaceOf(c); it != nil {
		if !r.resolving() {
			return Ends{}
		}
		e := r.cfg.Program.invokeEnds(it, c.Method)
		var args []ArgEnd
		for _, a := range e.OnArg {
			if a.Tx >= 1 && a.Err >= 1 {
				args = append(args, ArgEnd{Tx: a.Tx - 1, Err: a.Err - 1, Nil: a.Nil})
			}
		}
		return Ends{Always: shift(e.Always), OnErr: shift(e.OnErr), OnArg: args}
	}
	sf := StaticFn(c)
	if sf == nil {
		return Ends{}
	}
	if s := r.local(sf); s != nil {
		return s.Ends
	}
	if fn, ok := sf.Object().(*types.Func); ok {
		var f ClosesTx
		if r.Pass.ImportObjectFact(fn, &f) {
			return Ends{Always: f.Params, OnErr: f.OnErr, OnArg: f.OnArg}
		}
	}
	return Ends{}
}

// shift turns a concrete method's parameter indexes (receiver first)
// into an interface call's argument indexes.
func shift(ks []int) []int {
	var out []int
	for _, k := range ks {
		if k >= 1 {
			out = append(out, k-1)
		}
	}
	return out
}

// invokeEnds: how the implementations of an interface method end the
// transactions they are given (a decorator of the method, through what it
// wraps). A parameter is ended when every implementation ends it: on
// error, or as an error argument says, only when every one does so alike;
// otherwise always (precision first).
func (p *Program) invokeEnds(iface *types.Interface, m *types.Func) Ends {
	e, _ := p.ends(ifaceText(iface), m.Name(), map[string]bool{})
	return e
}

func (p *Program) ends(want map[string]string, method string, onPath map[string]bool) (Ends, verdict) {
	k := wantKey(want) + "|" + method
	if onPath[k] {
		return Ends{}, unknown
	}
	onPath[k] = true
	defer delete(onPath, k)
	var kinds map[int]string // parameter -> how every implementation so far ends it
	args := map[string]ArgEnd{}
	n := 0
	meet := func(e Ends) {
		k := map[int]string{}
		for _, i := range e.Always {
			k[i] = "always"
		}
		for _, i := range e.OnErr {
			k[i] = "onerr"
		}
		for _, a := range e.OnArg {
			key := fmt.Sprintf("arg %d %v", a.Err, a.Nil)
			k[a.Tx], args[key] = key, a
		}
		if n == 0 {
			kinds = k
		}
		for i, how := range kinds {
			switch other, ok := k[i]; {
			case !ok:
				delete(kinds, i)
			case other != how:
				kinds[i] = "always"
			}
		}
		n++
	}
	for _, f := range p.implementationsOf(want, method) {
		if f.fwd != nil {
			continue
		}
		s := p.summary(f.key)
		switch {
		case s == nil:
			return Ends{}, no
		case !s.Ends.empty():
			meet(s.Ends)
			continue
		}
		ds := delegates(s, want, method)
		if len(ds) == 0 {
			meet(Ends{})
		}
		for _, d := range ds {
			if e, v := p.ends(d.want, d.name, onPath); v != unknown {
				meet(e)
			}
		}
	}
	if n == 0 {
		return Ends{}, unknown
	}
	var e Ends
	for i, how := range kinds {
		switch how {
		case "always":
			e.Always = append(e.Always, i)
		case "onerr":
			e.OnErr = append(e.OnErr, i)
		default:
			a := args[how]
			e.OnArg = append(e.OnArg, ArgEnd{Tx: i, Err: a.Err, Nil: a.Nil})
		}
	}
	slices.Sort(e.Always)
	slices.Sort(e.OnErr)
	slices.SortFunc(e.OnArg, func(a, b ArgEnd) int { return a.Tx - b.Tx })
	if e.empty() {
		return e, no
	}
	return e, yes
}
