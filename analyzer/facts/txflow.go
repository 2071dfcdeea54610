package facts

import (
	"go/token"
	"go/types"
	"regexp"
	"strings"

	"golang.org/x/tools/go/ssa"
)

// Site is a place where a transaction begins: a Begin call, or (index 0 of
// a callback's flow) the runner call that runs the callback inside a
// transaction.
type Site struct {
	Pos    token.Pos
	Call   *ssa.Call // the Begin call or the runner call
	Runner bool
}

// TxFlow is a must-be-open analysis of the transactions of one function:
// a transaction is open at an instruction when every path from the entry
// reaches it after the transaction began and before its Commit or Rollback
// (deferred ones run at return and do not close it earlier). The error
// path of Begin is not in the transaction.
type TxFlow struct {
	r     *Result
	fn    *ssa.Function
	Sites []Site
	index map[*ssa.Call]int
	in    map[*ssa.BasicBlock]uint64
	// argCalls are the calls of helpers that end a transaction as an
	// error argument says, by that argument; argAt caches whether such a
	// call ends it where it is made (see [TxFlow.argEndsAt]).
	argCalls map[ssa.Value][]*ssa.Call
	argAt    map[*ssa.Call]map[ArgEnd]bool
}

// Flow returns the transaction flow of fn (cached).
func (r *Result) Flow(fn *ssa.Function) *TxFlow {
	if f := r.flows[fn]; f != nil {
		return f
	}
	f := &TxFlow{r: r, fn: fn, index: map[*ssa.Call]int{}, in: map[*ssa.BasicBlock]uint64{}}
	r.flows[fn] = f
	if rc := r.runnerOf[fn]; rc != nil {
		f.Sites = append(f.Sites, Site{Pos: rc.Pos(), Call: rc, Runner: true})
	}
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if call, ok := instr.(*ssa.Call); ok && f.r.IsBegin(&call.Call) && len(f.Sites) < 64 {
				f.index[call] = len(f.Sites)
				f.Sites = append(f.Sites, Site{Pos: call.Pos(), Call: call})
			}
		}
	}
	if len(f.Sites) == 0 || len(fn.Blocks) == 0 {
		return f
	}
	f.argCalls, f.argAt = map[ssa.Value][]*ssa.Call{}, map[*ssa.Call]map[ArgEnd]bool{}
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if call, ok := instr.(*ssa.Call); ok {
				for _, a := range f.r.closesParams(&call.Call).OnArg {
					if a.Tx < len(call.Call.Args) && a.Err < len(call.Call.Args) {
						v := call.Call.Args[a.Err]
						f.argCalls[v] = append(f.argCalls[v], call)
					}
				}
			}
		}
	}
	var entry uint64
	if len(f.Sites) > 0 && f.Sites[0].Runner {
		entry = 1
	}
	all := ^uint64(0)
	for _, b := range fn.Blocks {
		f.in[b] = all
	}
	f.in[fn.Blocks[0]] = entry
	if fn.Recover != nil {
		f.in[fn.Recover] = 0
	}
	for changed := true; changed; {
		changed = false
		for _, b := range fn.Blocks {
			if b.Index == 0 || b == fn.Recover {
				continue
			}
			v := all
			if len(b.Preds) == 0 {
				v = 0
			}
			for _, p := range b.Preds {
				v &= f.edgeOut(p, b)
			}
			if v != f.in[b] {
				f.in[b] = v
				changed = true
			}
		}
	}
	return f
}

func (f *TxFlow) edgeOut(p, succ *ssa.BasicBlock) uint64 {
	st := f.in[p]
	for _, instr := range p.Instrs {
		st = f.step(st, instr)
	}
	if call, notNil := f.r.endErrEdge(p, succ); call != nil && notNil {
		// a helper that ends its transactions when it returns an error
		for _, k := range f.r.closesParams(&call.Call).OnErr {
			if k < len(call.Call.Args) {
				st = f.close(st, call.Call.Args[k])
			}
		}
	}
	v, nilSucc := nilTest(p)
	if v == nil {
		return st
	}
	// a helper that ends a transaction as its error argument v says,
	// called before this branch on v
	for _, call := range f.argCalls[v] {
		if !call.Block().Dominates(p) {
			continue
		}
		for _, a := range f.r.closesParams(&call.Call).OnArg {
			if call.Call.Args[a.Err] == v && (succ == nilSucc) == a.Nil {
				st = f.close(st, call.Call.Args[a.Tx])
			}
		}
	}
	// Begin's error path (err != nil) holds no transaction
	if site := f.beginErr(v); site >= 0 && succ != nilSucc {
		st &^= 1 << uint(site)
	}
	return st
}

// beginErr: x is the error result of a Begin site.
func (f *TxFlow) beginErr(x ssa.Value) int {
	e, ok := x.(*ssa.Extract)
	if !ok || e.Index != 1 {
		return -1
	}
	call, ok := e.Tuple.(*ssa.Call)
	if !ok {
		return -1
	}
	if i, ok := f.index[call]; ok {
		return i
	}
	return -1
}

func (f *TxFlow) step(st uint64, instr ssa.Instruction) uint64 {
	call, ok := instr.(*ssa.Call)
	if !ok {
		return st
	}
	c := &call.Call
	if i, ok := f.index[call]; ok {
		return st | 1<<uint(i)
	}
	if v, ok := f.r.TxEnd(c); ok {
		return f.close(st, v)
	}
	if sf := StaticFn(c); sf != nil && sf.Parent() != nil {
		if s := f.r.local(sf); s != nil && s.ClosesAny {
			return 0
		}
	}
	e := f.r.closesParams(c)
	for _, k := range e.Always {
		if k < len(c.Args) {
			st = f.close(st, c.Args[k])
		}
	}
	if len(e.OnErr) > 0 && !errTested(call) {
		// the caller does not tell which: ended (precision first)
		for _, k := range e.OnErr {
			if k < len(c.Args) {
				st = f.close(st, c.Args[k])
			}
		}
	}
	for _, a := range e.OnArg {
		if a.Tx < len(c.Args) && a.Err < len(c.Args) && f.argEndsAt(call, a) {
			st = f.close(st, c.Args[a.Tx])
		}
	}
	return st
}

// argEndsAt: a helper that ends a transaction as its error argument says
// (a) ends it where it is called: the argument is nil, or the call lies
// under a branch that tells whether it is nil, as a requires; not when
// that branch says otherwise, or when a branch on the argument follows
// the call (its edges end it, see edgeOut); and when nothing tells,
// ended (precision first).
func (f *TxFlow) argEndsAt(call *ssa.Call, a ArgEnd) bool {
	if m, ok := f.argAt[call]; ok {
		if v, ok := m[a]; ok {
			return v
		}
	}
	v := f.argEnds(call, a)
	if f.argAt[call] == nil {
		f.argAt[call] = map[ArgEnd]bool{}
	}
	f.argAt[call][a] = v
	return v
}

// argEnds computes argEndsAt's answer.
func (f *TxFlow) argEnds(call *ssa.Call, a ArgEnd) bool {
	v := call.Call.Args[a.Err]
	if c, ok := v.(*ssa.Const); ok && c.IsNil() {
		return a.Nil
	}
	b := call.Block()
	for d := b.Idom(); d != nil; d = d.Idom() {
		x, nilSucc := nilTest(d)
		if x != v {
			continue
		}
		for _, s := range d.Succs {
			if len(s.Preds) == 1 && s.Dominates(b) {
				return (s == nilSucc) == a.Nil
			}
		}
	}
	if refs := v.Referrers(); refs != nil {
		for _, ref := range *refs {
			if rb := ref.Block(); rb != nil && b.Dominates(rb) {
				if x, _ := nilTest(rb); x == v {
					return false
				}
			}
		}
	}
	return true
}

func (f *TxFlow) close(st uint64, v ssa.Value) uint64 {
	sites := f.SitesOf(v)
	if len(sites) == 0 {
		return 0 // unknown transaction: assume it is the open one (precision first)
	}
	for _, i := range sites {
		st &^= 1 << uint(i)
	}
	return st
}

// SitesOf resolves a transaction value to the indexes of its sites.
func (f *TxFlow) SitesOf(v ssa.Value) []int {
	var out []int
	seen := map[ssa.Value]bool{}
	var walk func(v ssa.Value)
	walk = func(v ssa.Value) {
		if v == nil || seen[v] {
			return
		}
		seen[v] = true
		switch v := v.(type) {
		case *ssa.Extract:
			if call, ok := v.Tuple.(*ssa.Call); ok {
				if i, ok := f.index[call]; ok {
					out = append(out, i)
				}
			}
		case *ssa.Call:
			if i, ok := f.index[v]; ok { // gorm Begin, sqlx MustBegin
				out = append(out, i)
			} else if recv := chainRecv(&v.Call); recv != nil {
				walk(recv) // tx.Model(x).Where(..): the same gorm handle
			}
		case *ssa.FieldAddr:
			walk(v.X) // the *sql.Tx embedded in a sqlx.Tx, pop's Connection.TX
		case *ssa.Field:
			walk(v.X)
		case *ssa.Phi:
			for _, e := range v.Edges {
				walk(e)
			}
		case *ssa.ChangeType:
			walk(v.X)
		case *ssa.MakeInterface:
			walk(v.X)
		case *ssa.ChangeInterface:
			walk(v.X)
		case *ssa.TypeAssert:
			walk(v.X)
		case *ssa.UnOp:
			if a, ok := v.X.(*ssa.Alloc); ok && v.Op == token.MUL {
				for _, ref := range *a.Referrers() {
					if st, ok := ref.(*ssa.Store); ok && st.Addr == a {
						walk(st.Val)
					}
				}
			} else if _, ok := v.X.(*ssa.FieldAddr); ok && v.Op == token.MUL {
				walk(v.X)
			}
		case *ssa.Parameter:
			if len(f.Sites) > 0 && f.Sites[0].Runner && f.r.TxOrConn(v.Type()) {
				out = append(out, 0)
			}
		}
	}
	walk(v)
	return out
}

// chainRecv: c is a method of a gorm/pop handle returning the same kind of
// handle (tx.Model(x), tx.Where(..), tx.WithContext(ctx)); it returns the
// receiver.
func chainRecv(c *ssa.CallCommon) ssa.Value {
	if c.IsInvoke() || len(c.Args) == 0 || !IsConnTx(c.Args[0].Type()) {
		return nil
	}
	if res := c.Signature().Results(); res.Len() == 1 && IsConnTx(res.At(0).Type()) {
		return c.Args[0]
	}
	return nil
}

// OpenAt returns the set (bit i = Sites[i]) of transactions open just
// before instr.
func (f *TxFlow) OpenAt(instr ssa.Instruction) uint64 {
	if len(f.Sites) == 0 {
		return 0
	}
	b := instr.Block()
	st := f.in[b]
	for _, in := range b.Instrs {
		if in == instr {
			return st
		}
		st = f.step(st, in)
	}
	return st
}

// First returns the first open site in the set.
func (f *TxFlow) First(set uint64) Site {
	for i := range f.Sites {
		if set&(1<<uint(i)) != 0 {
			return f.Sites[i]
		}
	}
	return Site{}
}

var reWriteSQL = regexp.MustCompile(`(?i)\b(insert|update|delete|merge|upsert)\b`)

// ormWrites are the method names of ORM writes: gorm, pop, bun, ent's
// generated clients, firestore transactions.
var ormWrites = map[string]bool{
	"Create": true, "CreateInBatches": true, "Save": true, "Update": true, "Updates": true,
	"UpdateColumn": true, "UpdateColumns": true, "Delete": true, "Destroy": true,
	"ValidateAndCreate": true, "ValidateAndSave": true, "ValidateAndUpdate": true,
	"NewInsert": true, "NewUpdate": true, "NewDelete": true, "NewMerge": true,
	"CreateBulk": true, "UpdateOne": true, "UpdateOneID": true, "DeleteOne": true, "DeleteOneID": true,
	"Set": true, "Upsert": true, "Insert": true, "MustExec": true, "MustExecContext": true,
	"NamedExec": true, "NamedExecContext": true,
}

// TxWrite returns the receiver of c when c writes through it: an Exec or
// Query with INSERT/UPDATE/DELETE SQL (or an Exec whose SQL is not
// constant), or an ORM write. The receiver is a transaction when
// [TxFlow.SitesOf] resolves it to one.
func (r *Result) TxWrite(c *ssa.CallCommon) ssa.Value {
	fo := CalleeObj(c)
	if fo == nil {
		return nil
	}
	recv := c.Value
	if !c.IsInvoke() {
		if len(c.Args) == 0 {
			return nil
		}
		recv = c.Args[0]
	}
	if sig := fo.Type().(*types.Signature); sig.Recv() == nil {
		return nil
	}
	n := fo.Name()
	if sqlMethod(fo) {
		q, isConst := r.SQLOf(c)
		if isConst && !reWriteSQL.MatchString(q) || !isConst && !strings.HasPrefix(n, "Exec") {
			return nil
		}
		return recv
	}
	if ormWrites[n] {
		return recv
	}
	return nil
}
