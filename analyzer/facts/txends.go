package facts

import (
	"go/token"
	"go/types"
	"slices"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Ends is how a helper ends the transactions it is given, per path: the
// parameters (SSA indexes, receiver first) it commits or rolls back
// before every normal return, and those it ends exactly on the returns
// whose error result is not nil (a rollback on error). A parameter ended
// only on paths that panic or exit (PanicIfErrorWithRollback(err, tx)) is
// in neither: when the helper returns, the transaction is still open.
type Ends struct {
	Always []int
	OnErr  []int
}

func (e Ends) empty() bool { return len(e.Always) == 0 && len(e.OnErr) == 0 }

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

// endsOf computes how fn ends its transaction parameters (see [Ends]): a
// may-be-ended analysis over fn's CFG (a Commit or Rollback of a parameter,
// deferred or not, or a call of a helper that ends it), read at each
// return that a call of os.Exit or log.Fatal does not precede.
func (r *Result) endsOf(fn *ssa.Function) Ends {
	params := r.txParams(fn)
	if params == 0 || len(fn.Blocks) == 0 {
		return Ends{}
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
		return st
	}
	out := func(b *ssa.BasicBlock, in uint64, succ *ssa.BasicBlock) uint64 {
		st := in
		for _, instr := range b.Instrs {
			if noReturn(instr) {
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
	for changed := true; changed; {
		changed = false
		for _, b := range fn.Blocks {
			var v uint64
			for _, p := range b.Preds {
				v |= out(p, in[p], b)
			}
			if v|in[b] != in[b] {
				in[b] |= v
				changed = true
			}
		}
	}
	// At each return: which parameters may be ended, and whether its
	// error result is a nil constant.
	type ret struct {
		ended  uint64
		nilErr bool
		hasErr bool
	}
	var rets []ret
	for _, b := range fn.Blocks {
		r0, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return)
		if !ok {
			continue
		}
		st := out(b, in[b], nil)
		if slices.ContainsFunc(b.Instrs, noReturn) {
			continue
		}
		x := ret{ended: st}
		if n := len(r0.Results); n > 0 && types.Identical(r0.Results[n-1].Type(), errorType) {
			x.hasErr = true
			if c, ok := r0.Results[n-1].(*ssa.Const); ok && c.IsNil() {
				x.nilErr = true
			}
		}
		rets = append(rets, x)
	}
	var e Ends
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
			// ended on every return, or on some without telling which
			// by its error: ended at the call (precision first)
			e.Always = append(e.Always, i)
		}
	}
	return e
}

// noReturn: instr is a call that does not return (os.Exit, log.Fatal*,
// a logger's Fatal or Fatalf method that returns nothing).
func noReturn(instr ssa.Instruction) bool {
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
	case p == "log" && (n == "Fatal" || n == "Fatalf" || n == "Fatalln"):
		return true
	case n == "Fatal" || n == "Fatalf" || n == "Fatalln":
		sig := fn.Type().(*types.Signature)
		return sig.Recv() != nil && sig.Results().Len() == 0
	}
	return false
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
	iff, ok := b.Instrs[len(b.Instrs)-1].(*ssa.If)
	if !ok || len(b.Succs) != 2 {
		return nil, false
	}
	cond, ok := iff.Cond.(*ssa.BinOp)
	if !ok || (cond.Op != token.NEQ && cond.Op != token.EQL) {
		return nil, false
	}
	x, y := cond.X, cond.Y
	if c, ok := x.(*ssa.Const); ok && c.IsNil() {
		x, y = y, x
	}
	if c, ok := y.(*ssa.Const); !ok || !c.IsNil() {
		return nil, false
	}
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
	notNil := cond.Op == token.NEQ && b.Succs[0] == succ || cond.Op == token.EQL && b.Succs[1] == succ
	return call, notNil
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
		return Ends{Always: shift(e.Always), OnErr: shift(e.OnErr)}
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
			return Ends{Always: f.Params, OnErr: f.OnErr}
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
// transactions they are given. A parameter is ended when every
// implementation ends it; on error only when every one does so on error.
func (p *Program) invokeEnds(iface *types.Interface, m *types.Func) Ends {
	var always, onErr map[int]bool
	n := 0
	for _, f := range p.implementations(iface, m) {
		if f.fwd != nil {
			continue
		}
		s := p.summary(f.key)
		if s == nil {
			return Ends{}
		}
		a, o := map[int]bool{}, map[int]bool{}
		for _, k := range s.Ends.Always {
			a[k] = true
		}
		for _, k := range s.Ends.OnErr {
			o[k] = true
		}
		if n == 0 {
			always, onErr = a, o
		} else {
			for k := range always {
				if !a[k] && !o[k] {
					delete(always, k)
				}
			}
			for k := range onErr {
				switch {
				case a[k]:
					always[k] = true // ended always by one, on error by another
					delete(onErr, k)
				case !o[k]:
					delete(onErr, k)
				}
			}
			for k := range a {
				if onErr[k] {
					always[k] = true
					delete(onErr, k)
				}
			}
		}
		n++
	}
	var e Ends
	for k := range always {
		e.Always = append(e.Always, k)
	}
	for k := range onErr {
		e.OnErr = append(e.OnErr, k)
	}
	slices.Sort(e.Always)
	slices.Sort(e.OnErr)
	return e
}
