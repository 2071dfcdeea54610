package facts

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Path is a chain of calls that ends in a network call (or another action).
type Path struct {
	Chain   []string  // callee names, from the called function to the leaf
	Leaf    string    // file:line:col of the leaf call
	LeafPos token.Pos // the leaf call, when it is in the analyzed package
	Decl    token.Pos // declaration of the first callee, when known
	// Handoff, when the I/O is done by another goroutine: where the work
	// is handed off ("a goroutine started at webhook.go:95:2").
	Handoff string
}

func (p *Path) String() string { return strings.Join(p.Chain, " -> ") }

// Action is a definite-failure action.
type Action struct {
	What  string   // "writes a FAILED status", "refunds", ...
	Chain []string // through which calls
}

func (a *Action) String() string {
	if len(a.Chain) <= 1 {
		return a.What
	}
	return a.What + " (" + strings.Join(a.Chain, " -> ") + ")"
}

// Summary is what is known about one SSA function of the analyzed package.
type Summary struct {
	Net        *Path
	Runner     int // param index of the callback run inside a tx, or -1
	Timeout    bool
	Fail       *Action
	Status     *StatusWriter // the parameter (or field of one) it writes as a status
	Sets       *FieldSet     // a setter of a parameter's state/status field
	TokenDel   *Path
	Claim      bool // claims an idempotency token atomically
	Ends       Ends // how it ends the transactions it is given, per path
	ClosesAny  bool // commits or rolls back some tx (not deferred)
	CallsParam map[int]bool
	Writes     bool  // writes to a database (SQL INSERT/UPDATE/DELETE, an ORM write)
	Begins     bool  // returns a freshly begun transaction
	NoReturn   bool  // never returns: every path panics, exits or loops forever
	KeyBuilder bool  // returns a string that names an idempotency key ("idempotency:" + ...)
	MayIO      *Path // I/O out of sight: a cgo call, a send on a channel
}

// Result is the facts analyzer's result for one package.
type Result struct {
	Pass      *analysis.Pass
	SSA       *SSA
	cfg       *Config
	sums      map[*ssa.Function]*Summary
	flows     map[*ssa.Function]*TxFlow
	runnerOf  map[*ssa.Function]*ssa.Call
	pending   atomic.Int32
	listMu    sync.Mutex
	listSets  map[*string]map[string]bool
	normNames map[*types.Func]string
	lpMu      sync.Mutex
	lparens   map[token.Pos]token.Pos
	txMu      sync.Mutex
	txTypes   map[types.Type]bool
	globals   globalWrites // stores into the package's variables
}

func run(pass *analysis.Pass, cfg *Config) (*Result, error) {
	r := &Result{
		Pass:     pass,
		SSA:      buildSSA(pass),
		cfg:      cfg,
		sums:     map[*ssa.Function]*Summary{},
		flows:    map[*ssa.Function]*TxFlow{},
		runnerOf: map[*ssa.Function]*ssa.Call{},
	}
	r.globals = indexGlobals(r.SSA)
	for _, fn := range r.SSA.SrcFuncs {
		r.sums[fn] = &Summary{Runner: -1, CallsParam: map[int]bool{}, Sets: fieldSetOf(fn)}
	}
	for round := 0; round < 4; round++ {
		r.fixpoint()
		if !r.inferRunners() {
			break
		}
	}
	r.export()
	if cfg.Recording && cfg.Program != nil {
		r.recordInvokes()
	}
	if cfg.Recording && cfg.Consumers == 0 {
		r.release() // no rule reads it
	} else {
		r.pending.Store(int32(cfg.Consumers))
	}
	return r, nil
}

// Done tells the result that one rule is done with it; when all the
// configured consumers are, its SSA form and summaries are dropped.
func (r *Result) Done() {
	if r.cfg.Consumers > 0 && r.pending.Add(-1) == 0 {
		r.release()
	}
}

func (r *Result) release() {
	r.SSA = &SSA{}
	r.sums = map[*ssa.Function]*Summary{}
	r.flows = map[*ssa.Function]*TxFlow{}
	r.runnerOf = map[*ssa.Function]*ssa.Call{}
	r.globals = globalWrites{}
}

// listed reports whether fn is in a configured list. The lists are turned
// into sets, and each function's normalized name computed, once per
// package: names are compared on every call of every function.
func (r *Result) listed(fn *types.Func, list []string) bool {
	if len(list) == 0 {
		return false
	}
	r.listMu.Lock()
	defer r.listMu.Unlock()
	if r.listSets == nil {
		r.listSets = map[*string]map[string]bool{}
		r.normNames = map[*types.Func]string{}
	}
	set := r.listSets[&list[0]]
	if set == nil {
		set = map[string]bool{}
		for _, l := range list {
			set[normName(l)] = true
		}
		r.listSets[&list[0]] = set
	}
	n, ok := r.normNames[fn]
	if !ok {
		n = normName(FullName(fn))
		r.normNames[fn] = n
	}
	return set[n]
}

// Config returns the configuration the result was computed with.
func (r *Result) Config() *Config { return r.cfg }

// Summary returns the summary of a function of the analyzed package, or nil.
func (r *Result) Summary(fn *ssa.Function) *Summary { return r.sums[fn] }

// CallStart returns the start of the call expression whose Lparen is at
// pos (where SSA puts a call), or pos.
func (r *Result) CallStart(pos token.Pos) token.Pos {
	r.lpMu.Lock()
	defer r.lpMu.Unlock()
	if r.lparens == nil {
		r.lparens = map[token.Pos]token.Pos{}
		for _, f := range r.Pass.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					r.lparens[c.Lparen] = c.Pos()
				}
				return true
			})
		}
	}
	if p, ok := r.lparens[pos]; ok {
		return p
	}
	return pos
}

// PosString formats pos as file:line:col (base name of the file).
func (r *Result) PosString(pos token.Pos) string {
	p := r.Pass.Fset.Position(pos)
	return fmt.Sprintf("%s:%d:%d", filepath.Base(p.Filename), p.Line, p.Column)
}

// DisplayName names an SSA function for messages.
func DisplayName(fn *ssa.Function) string {
	if o := fn.Origin(); o != nil {
		fn = o
	}
	if f, ok := fn.Object().(*types.Func); ok {
		return FuncName(f)
	}
	name := strings.ReplaceAll(fn.Name(), "$", ".func")
	if fn.Pkg != nil && fn.Parent() != nil {
		p := fn
		for p.Parent() != nil {
			p = p.Parent()
		}
		if f, ok := p.Object().(*types.Func); ok {
			if sig := f.Type().(*types.Signature); sig.Recv() != nil {
				return "(" + typeName(sig.Recv().Type(), false) + ")." + name
			}
		}
		return fn.Pkg.Pkg.Name() + "." + name
	}
	return name
}

func (r *Result) local(fn *ssa.Function) *Summary {
	if fn == nil {
		return nil
	}
	return r.sums[fn]
}

// funcsOf resolves a func-valued SSA value to the functions it may be.
func funcsOf(v ssa.Value, seen map[ssa.Value]bool) []*ssa.Function {
	if seen[v] {
		return nil
	}
	seen[v] = true
	switch v := v.(type) {
	case *ssa.Function:
		return []*ssa.Function{v}
	case *ssa.MakeClosure:
		if fn, ok := v.Fn.(*ssa.Function); ok {
			return []*ssa.Function{fn}
		}
	case *ssa.Phi:
		var out []*ssa.Function
		for _, e := range v.Edges {
			out = append(out, funcsOf(e, seen)...)
		}
		return out
	case *ssa.ChangeType:
		return funcsOf(v.X, seen)
	case *ssa.MakeInterface:
		return funcsOf(v.X, seen)
	case *ssa.UnOp:
		if a, ok := v.X.(*ssa.Alloc); ok && v.Op == token.MUL {
			var out []*ssa.Function
			for _, ref := range *a.Referrers() {
				if st, ok := ref.(*ssa.Store); ok && st.Addr == a {
					out = append(out, funcsOf(st.Val, seen)...)
				}
			}
			return out
		}
		if fv, ok := v.X.(*ssa.FreeVar); ok && v.Op == token.MUL {
			// a variable of the enclosing function, captured by reference
			if b := binding(fv); b != nil {
				return funcsOf(&ssa.UnOp{Op: token.MUL, X: b}, seen)
			}
		}
	case *ssa.FreeVar:
		if b := binding(v); b != nil {
			return funcsOf(b, seen)
		}
	}
	return nil
}

// binding returns the value the enclosing function binds to fv, when the
// closure is made in one place.
func binding(fv *ssa.FreeVar) ssa.Value {
	fn := fv.Parent()
	if fn == nil || fn.Parent() == nil {
		return nil
	}
	idx := -1
	for i, f := range fn.FreeVars {
		if f == fv {
			idx = i
		}
	}
	var bound ssa.Value
	for _, b := range fn.Parent().Blocks {
		for _, instr := range b.Instrs {
			if mc, ok := instr.(*ssa.MakeClosure); ok && mc.Fn == fn && idx >= 0 && idx < len(mc.Bindings) {
				if bound != nil && bound != mc.Bindings[idx] {
					return nil
				}
				bound = mc.Bindings[idx]
			}
		}
	}
	return bound
}

// pathVia prefixes p with the callee name.
func pathVia(name string, p *Path, decl token.Pos, local bool) *Path {
	q := &Path{Chain: append([]string{name}, p.Chain...), Leaf: p.Leaf, Decl: decl, Handoff: p.Handoff}
	if local {
		q.LeafPos = p.LeafPos
	}
	return q
}

// NetCall reports whether the call may do network I/O, and through which
// chain (starting with the callee).
func (r *Result) NetCall(c *ssa.CallCommon) *Path {
	if fn := CalleeObj(c); fn != nil && (builtinNet(fn) || r.listed(fn, r.cfg.NetFuncs)) {
		return &Path{Chain: []string{FuncName(fn)}, Leaf: r.PosString(r.CallStart(c.Pos())), LeafPos: c.Pos(), Decl: fn.Pos()}
	}
	if p := r.invokeNet(c, ifaceOf(c)); p != nil {
		return p
	}
	var cands []*ssa.Function
	if sf := StaticFn(c); sf != nil {
		cands = []*ssa.Function{sf}
	} else if !c.IsInvoke() {
		cands = funcsOf(c.Value, map[ssa.Value]bool{})
	}
	for _, sf := range cands {
		if s := r.local(sf); s != nil {
			if s.Net != nil {
				return pathVia(DisplayName(sf), s.Net, sf.Pos(), true)
			}
			continue
		}
		if fn, ok := sf.Object().(*types.Func); ok {
			if fn.Origin() != nil {
				fn = fn.Origin()
			}
			var f NetIO
			if r.Pass.ImportObjectFact(fn, &f) {
				return &Path{Chain: append([]string{FuncName(fn)}, f.Chain...), Leaf: f.Leaf, Decl: fn.Pos(), Handoff: f.Handoff}
			}
			// pay := s.LN.PayInvoice: the bound method of an interface
			if builtinNet(fn) || r.listed(fn, r.cfg.NetFuncs) {
				return &Path{Chain: []string{FuncName(fn)}, Leaf: r.PosString(r.CallStart(c.Pos())), LeafPos: c.Pos(), Decl: fn.Pos()}
			}
			if sig := fn.Type().(*types.Signature); sig.Recv() != nil && r.resolving() {
				if it, ok := sig.Recv().Type().Underlying().(*types.Interface); ok {
					if p := r.invokeNet(&ssa.CallCommon{Value: &ssa.Const{}, Method: fn}, it); p != nil {
						return p
					}
				}
			}
		}
	}
	return r.callbackNet(c)
}

// recordInvokes tells the Program which interface methods the package
// calls (and hands method values of), so that the command knows which
// packages a second pass could change.
func (r *Result) recordInvokes() {
	for _, fn := range r.SSA.SrcFuncs {
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				switch in := instr.(type) {
				case ssa.CallInstruction:
					if it := ifaceOf(in.Common()); it != nil {
						r.cfg.Program.invoked(r.Pass.Pkg.Path(), it, in.Common().Method)
					}
				case *ssa.MakeClosure:
					if f, ok := in.Fn.(*ssa.Function); ok {
						if m, ok := f.Object().(*types.Func); ok {
							if sig := m.Type().(*types.Signature); sig.Recv() != nil {
								if it, ok := sig.Recv().Type().Underlying().(*types.Interface); ok {
									r.cfg.Program.invoked(r.Pass.Pkg.Path(), it, m)
								}
							}
						}
					}
				}
			}
		}
	}
}

// resolving reports whether interface calls are resolved through the
// whole program.
func (r *Result) resolving() bool { return r.cfg.Program != nil && !r.cfg.Recording }

func ifaceOf(c *ssa.CallCommon) *types.Interface {
	if !c.IsInvoke() {
		return nil
	}
	it, _ := c.Value.Type().Underlying().(*types.Interface)
	return it
}

// invokeNet: an interface call whose every implementation in the program
// does network I/O.
func (r *Result) invokeNet(c *ssa.CallCommon, it *types.Interface) *Path {
	if it == nil || !r.resolving() {
		return nil
	}
	impl, f := r.cfg.Program.invokeNet(it, c.Method)
	if impl == "" {
		return nil
	}
	chain := append([]string{FuncName(c.Method), impl}, f.Chain...)
	return &Path{Chain: chain, Leaf: f.Leaf, Handoff: f.Handoff}
}

// callbackNet: a call that runs a func argument (a transaction runner or a
// function known to call that parameter) which does network I/O.
func (r *Result) callbackNet(c *ssa.CallCommon) *Path {
	name, decl := "", token.NoPos
	if fn := CalleeObj(c); fn != nil {
		name, decl = FuncName(fn), fn.Pos()
	} else if sf := StaticFn(c); sf != nil {
		name, decl = DisplayName(sf), sf.Pos()
	} else {
		return nil
	}
	idx := map[int]bool{}
	if i := r.RunnerArg(c); i >= 0 {
		idx[i] = true
	}
	if sf := StaticFn(c); sf != nil {
		if s := r.local(sf); s != nil {
			for i := range s.CallsParam {
				idx[i] = true
			}
		} else if fn, ok := sf.Object().(*types.Func); ok {
			var f CallsParams
			if r.Pass.ImportObjectFact(fn, &f) {
				for _, i := range f.Params {
					idx[i] = true
				}
			}
		}
	}
	for i := range c.Args {
		if !idx[i] {
			continue
		}
		for _, f := range funcsOf(c.Args[i], map[ssa.Value]bool{}) {
			if p := r.NetCall(&ssa.CallCommon{Value: f}); p != nil {
				return pathVia(name, p, decl, true)
			}
		}
	}
	return nil
}

// RunnerArg returns the index in c.Args of a callback that the callee runs
// inside a transaction, or -1.
func (r *Result) RunnerArg(c *ssa.CallCommon) int {
	if fn := CalleeObj(c); fn != nil {
		if knownRunner(fn) || r.listed(fn, r.cfg.TxRunners) {
			if k := lastFuncArg(c); k >= 0 {
				return k
			}
		}
	}
	if it := ifaceOf(c); it != nil && r.resolving() {
		// the index counts the concrete method's receiver
		if k := r.cfg.Program.invokeRunner(it, c.Method) - 1; k >= 0 && k < len(c.Args) {
			return k
		}
	}
	if sf := StaticFn(c); sf != nil {
		if s := r.local(sf); s != nil {
			if s.Runner >= 0 && s.Runner < len(c.Args) {
				return s.Runner
			}
		} else if fn, ok := sf.Object().(*types.Func); ok {
			var f TxRunner
			if r.Pass.ImportObjectFact(fn, &f) && f.Param < len(c.Args) {
				return f.Param
			}
		}
	}
	for i, a := range c.Args {
		if r.takesTx(a.Type()) {
			return i
		}
	}
	return -1
}

// RunnerCall returns the call that runs the anonymous function fn inside a
// transaction (fn passed directly to a runner), or nil.
func (r *Result) RunnerCall(fn *ssa.Function) *ssa.Call { return r.runnerOf[fn] }

// IsTimeoutCheck reports whether instr tells a timeout apart.
func (r *Result) IsTimeoutCheck(instr ssa.Instruction) bool {
	switch in := instr.(type) {
	case *ssa.BinOp:
		if in.Op != token.EQL && in.Op != token.NEQ {
			return false
		}
		return isTimeoutValue(in.X) || isTimeoutValue(in.Y)
	case ssa.CallInstruction:
		c := in.Common()
		fn := CalleeObj(c)
		if fn != nil {
			switch {
			case rulekit.PkgPath(fn) == "errors" && fn.Name() == "Is" && len(c.Args) == 2:
				return isTimeoutValue(c.Args[1])
			case rulekit.PkgPath(fn) == "errors" && fn.Name() == "As" && len(c.Args) == 2:
				return hasTimeoutMethod(unwrap(c.Args[1]).Type())
			case rulekit.PkgPath(fn) == "os" && fn.Name() == "IsTimeout":
				return true
			case fn.Name() == "Timeout":
				sig := fn.Type().(*types.Signature)
				if sig.Params().Len() == 0 && sig.Results().Len() == 1 {
					if b, ok := sig.Results().At(0).Type().(*types.Basic); ok && b.Kind() == types.Bool {
						return true
					}
				}
			}
		}
		if sf := StaticFn(c); sf != nil {
			if s := r.local(sf); s != nil {
				return s.Timeout
			}
			if fn != nil {
				var f TimeoutCheck
				return r.Pass.ImportObjectFact(fn, &f)
			}
		}
	}
	return false
}

// hasTimeoutMethod: t is a pointer to a type with a Timeout() bool method
// (errors.As(err, &netErr) is the first half of a timeout check).
func hasTimeoutMethod(t types.Type) bool {
	p, ok := t.(*types.Pointer)
	if !ok {
		return false
	}
	obj, _, _ := types.LookupFieldOrMethod(p.Elem(), true, nil, "Timeout")
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	sig := fn.Type().(*types.Signature)
	return sig.Params().Len() == 0 && sig.Results().Len() == 1
}

func isTimeoutValue(v ssa.Value) bool {
	if mi, ok := v.(*ssa.MakeInterface); ok {
		v = mi.X
	}
	if u, ok := v.(*ssa.UnOp); ok && u.Op == token.MUL {
		if g, ok := u.X.(*ssa.Global); ok && g.Pkg != nil {
			p := g.Pkg.Pkg.Path()
			return (p == "context" && g.Name() == "DeadlineExceeded") || (p == "os" && g.Name() == "ErrDeadlineExceeded")
		}
	}
	if c, ok := v.(*ssa.Const); ok && c.Value != nil {
		if p, n := rulekit.NamedOf(c.Type()); p == pkgCodes && n == "Code" {
			if c.Value.Kind() == constant.Int {
				x, _ := constant.Uint64Val(c.Value)
				return x == codeDeadl || x == codeUnav
			}
		}
	}
	return false
}

// flatArgs returns c's arguments with a variadic slice expanded.
func flatArgs(c *ssa.CallCommon) []ssa.Value {
	var out []ssa.Value
	for _, a := range c.Args {
		if sl, ok := a.(*ssa.Slice); ok {
			if al, ok := sl.X.(*ssa.Alloc); ok {
				for _, ref := range *al.Referrers() {
					if ia, ok := ref.(*ssa.IndexAddr); ok {
						for _, r2 := range *ia.Referrers() {
							if st, ok := r2.(*ssa.Store); ok && st.Addr == ia {
								out = append(out, st.Val)
							}
						}
					}
				}
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

func unwrap(v ssa.Value) ssa.Value {
	for {
		switch x := v.(type) {
		case *ssa.MakeInterface:
			v = x.X
		case *ssa.ChangeType:
			v = x.X
		case *ssa.Convert:
			v = x.X
		case *ssa.ChangeInterface:
			v = x.X
		default:
			return v
		}
	}
}

// FailCall reports whether c is a definite-failure action (other than a
// transaction rollback): a FAILED status write, a refund, a token delete or
// a permanent error of the idem runtime.
func (r *Result) FailCall(c *ssa.CallCommon) *Action {
	fn := CalleeObj(c)
	name := ""
	if fn != nil {
		name = FuncName(fn)
		if rulekit.PkgPath(fn) == "testing" {
			return nil
		}
	}
	if p := r.TokenDeleteCall(c); p != nil {
		return &Action{What: "deletes the idempotency token", Chain: p.Chain}
	}
	if fn != nil && r.listed(fn, r.cfg.FailFuncs) {
		return &Action{What: "takes a failure action", Chain: []string{name}}
	}
	if what := r.OrmFailWrite(c); what != "" {
		return &Action{What: what, Chain: []string{name}}
	}
	if what := FirestoreFailWrite(c); what != "" {
		return &Action{What: what, Chain: []string{name}}
	}
	args := flatArgs(c)
	failedArg := -1
	for i, a := range args {
		if isFailedConst(unwrap(a)) {
			failedArg = i
		}
	}
	if q, ok := r.SQLOf(c); ok {
		if (reInsert.MatchString(q) || reUpdate.MatchString(q)) && (reFailSQL.MatchString(q) || failedArg >= 0) {
			return &Action{What: "writes a FAILED status", Chain: []string{name}}
		}
		if sqlReversal(q, args) {
			return &Action{What: "inserts a refund or reversal entry", Chain: []string{name}}
		}
		return nil
	}
	if cmd := redisCmd(c); cmd != "" {
		if (cmd == "Set" || cmd == "HSet" || cmd == "SetArgs" || cmd == "SetEx") && failedArg >= 0 {
			return &Action{What: "writes a FAILED status", Chain: []string{name}}
		}
		return nil
	}
	if fn != nil {
		if strings.HasPrefix(rulekit.PkgPath(fn), pkgIdem) && rePermanent.MatchString(fn.Name()) {
			return &Action{What: "returns a permanent failure", Chain: []string{name}}
		}
		if strings.HasPrefix(rulekit.PkgPath(fn), pkgIdem) && fn.Name() == "Retryable" {
			return &Action{What: "releases the record, so a retry runs the effect again", Chain: []string{name}}
		}
		for _, a := range args {
			if IsIdemPermanent(a) {
				return &Action{What: "returns a permanent failure (wraps the idem runtime's ErrPermanent)", Chain: []string{name}}
			}
		}
		if r.sameModule(fn) {
			if reRefund.MatchString(fn.Name()) {
				return &Action{What: "refunds", Chain: []string{name}}
			}
			if reMarkFailed.MatchString(fn.Name()) {
				return &Action{What: "marks the operation failed", Chain: []string{name}}
			}
		}
		if failedArg >= 0 && reStatusSetter.MatchString(fn.Name()) {
			return &Action{What: "writes a FAILED status", Chain: []string{name}}
		}
	}
	if it := ifaceOf(c); it != nil && r.resolving() {
		if impl, sw := r.cfg.Program.invokeStatus(it, c.Method); sw != nil && r.failedStatus(c, sw, 1) {
			return &Action{What: "writes a FAILED status", Chain: []string{name, impl}}
		}
	}
	sf := StaticFn(c)
	if sf == nil {
		return nil
	}
	if s := r.local(sf); s != nil {
		if s.Status != nil && r.failedStatus(c, s.Status, 0) {
			return &Action{What: "writes a FAILED status", Chain: []string{DisplayName(sf)}}
		}
		if s.Fail != nil && !s.Timeout {
			return &Action{What: s.Fail.What, Chain: append([]string{DisplayName(sf)}, s.Fail.Chain...)}
		}
		return nil
	}
	if fn == nil {
		return nil
	}
	var sw StatusWriter
	if r.Pass.ImportObjectFact(fn, &sw) && r.failedStatus(c, &sw, 0) {
		return &Action{What: "writes a FAILED status", Chain: []string{name}}
	}
	var fa FailAction
	if r.Pass.ImportObjectFact(fn, &fa) {
		return &Action{What: fa.What, Chain: append([]string{name}, fa.Chain...)}
	}
	return nil
}

// sameModule: names are trusted for the service's own functions (and
// interfaces), not for a library's (logrus's releaseEntry releases a pool
// entry). Without module information (GOPATH) every package counts.
func (r *Result) sameModule(fn *types.Func) bool {
	m := r.Pass.Module
	if m == nil || m.Path == "" || fn.Pkg() == nil {
		return true
	}
	p := fn.Pkg().Path()
	return p == m.Path || strings.HasPrefix(p, m.Path+"/")
}

// IsIdemPermanent reports whether v is the idem runtime's ErrPermanent.
func IsIdemPermanent(v ssa.Value) bool {
	v = unwrap(v)
	u, ok := v.(*ssa.UnOp)
	if !ok || u.Op != token.MUL {
		return false
	}
	g, ok := u.X.(*ssa.Global)
	return ok && g.Pkg != nil && strings.HasPrefix(g.Pkg.Pkg.Path(), pkgIdem) && g.Name() == "ErrPermanent"
}

// TokenDeleteCall reports whether c deletes an idempotency token or record.
func (r *Result) TokenDeleteCall(c *ssa.CallCommon) *Path {
	if RedisTokenOp(c) == "delete" || r.SQLTokenOp(c) == "delete" || r.GenericTokenOp(c) == "delete" {
		return &Path{Chain: []string{FuncName(CalleeObj(c))}, Leaf: r.PosString(r.CallStart(c.Pos())), LeafPos: c.Pos()}
	}
	if it := ifaceOf(c); it != nil && r.resolving() {
		if impl, f := r.cfg.Program.invokeTokenDel(it, c.Method); impl != "" {
			return &Path{Chain: append([]string{FuncName(c.Method), impl}, f.Chain...)}
		}
	}
	sf := StaticFn(c)
	if sf == nil {
		return nil
	}
	if s := r.local(sf); s != nil {
		if s.TokenDel != nil {
			return pathVia(DisplayName(sf), s.TokenDel, sf.Pos(), true)
		}
		return nil
	}
	if fn, ok := sf.Object().(*types.Func); ok {
		var f TokenDelete
		if r.Pass.ImportObjectFact(fn, &f) {
			return &Path{Chain: append([]string{FuncName(fn)}, f.Chain...), Decl: fn.Pos()}
		}
	}
	return nil
}

// ClaimCall reports whether c claims an idempotency token atomically,
// directly or through a helper.
func (r *Result) ClaimCall(c *ssa.CallCommon) bool {
	if RedisTokenOp(c) == "claim" || r.GenericTokenOp(c) == "claim" {
		return true
	}
	switch r.SQLTokenOp(c) {
	case "insert", "update", "lock":
		return true
	}
	sf := StaticFn(c)
	if sf == nil {
		return false
	}
	if s := r.local(sf); s != nil {
		return s.Claim
	}
	if fn, ok := sf.Object().(*types.Func); ok {
		var f TokenClaim
		return r.Pass.ImportObjectFact(fn, &f)
	}
	return false
}

func paramIndex(fn *ssa.Function, v ssa.Value) int {
	v = unwrap(v)
	if p, ok := v.(*ssa.Parameter); ok {
		for i, q := range fn.Params {
			if q == p {
				return i
			}
		}
	}
	return -1
}

// fixpoint computes the summaries of the package's functions.
func (r *Result) fixpoint() {
	for changed := true; changed; {
		changed = false
		for _, fn := range r.SSA.SrcFuncs {
			if r.summarize(fn) {
				changed = true
			}
		}
	}
}

func (r *Result) summarize(fn *ssa.Function) bool {
	s := r.sums[fn]
	changed := false
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if !s.Timeout && r.IsTimeoutCheck(instr) {
				s.Timeout, changed = true, true
			}
			if s.MayIO == nil {
				if p := r.opaqueIO(instr); p != nil {
					s.MayIO, changed = p, true
				}
			}
			ci, ok := instr.(ssa.CallInstruction)
			if !ok {
				continue
			}
			c := ci.Common()
			if s.Net == nil {
				if p := r.NetCall(c); p != nil {
					if g, isGo := instr.(*ssa.Go); isGo && p.Handoff == "" {
						q := *p
						q.Handoff = "a goroutine started at " + r.PosString(g.Pos())
						p = &q
					}
					s.Net, changed = p, true
				}
			}
			if i := paramIndex(fn, c.Value); i >= 0 && !c.IsInvoke() && !s.CallsParam[i] {
				s.CallsParam[i], changed = true, true
			}
			if s.Fail == nil {
				if a := r.FailCall(c); a != nil {
					s.Fail, changed = a, true
				}
			}
			if s.TokenDel == nil {
				if p := r.TokenDeleteCall(c); p != nil {
					s.TokenDel, changed = p, true
				}
			}
			if !s.Claim && r.ClaimCall(c) {
				s.Claim, changed = true, true
			}
			if !s.Writes && r.dbWrite(c) {
				s.Writes, changed = true, true
			}
			if _, isCall := instr.(*ssa.Call); isCall {
				if _, ok := r.TxEnd(c); ok {
					if !s.ClosesAny {
						s.ClosesAny, changed = true, true
					}
				}
				if sf := StaticFn(c); sf != nil && sf.Parent() != nil {
					if cs := r.local(sf); cs != nil && cs.ClosesAny && !s.ClosesAny {
						s.ClosesAny, changed = true, true
					}
				}
			}
			if s.Status == nil {
				if sw := r.statusSink(fn, c); sw != nil {
					s.Status, changed = sw, true
				}
			}
		}
	}
	if e := r.endsOf(fn); !e.equal(s.Ends) {
		s.Ends, changed = e, true
	}
	if !s.Begins && r.returnsBegun(fn) {
		s.Begins, changed = true, true
	}
	if !s.NoReturn && r.neverReturns(fn) {
		s.NoReturn, changed = true, true
	}
	if !s.KeyBuilder && buildsTokenKeys(fn) {
		s.KeyBuilder, changed = true, true
	}
	if s.TokenDel == nil {
		if p := r.namedTokenDelete(fn); p != nil {
			s.TokenDel, changed = p, true
		}
	}
	return changed
}

// inferRunners computes transaction flows, infers user transaction runners
// and which closures run inside a transaction. It reports whether a runner
// summary changed.
func (r *Result) inferRunners() bool {
	changed := false
	r.flows = map[*ssa.Function]*TxFlow{}
	r.runnerOf = map[*ssa.Function]*ssa.Call{}
	for _, fn := range r.SSA.SrcFuncs {
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				call, ok := instr.(*ssa.Call)
				if !ok {
					continue
				}
				if i := r.RunnerArg(&call.Call); i >= 0 {
					for _, f := range funcsOf(call.Call.Args[i], map[ssa.Value]bool{}) {
						if f.Parent() != nil && r.sums[f] != nil {
							r.runnerOf[f] = call
						}
					}
				}
			}
		}
	}
	for _, fn := range r.SSA.SrcFuncs {
		fl := r.Flow(fn)
		s := r.sums[fn]
		if s.Runner >= 0 {
			continue
		}
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				call, ok := instr.(*ssa.Call)
				if !ok {
					continue
				}
				c := &call.Call
				if c.IsInvoke() {
					continue
				}
				if fl.OpenAt(instr) != 0 {
					// fn calls its func parameter (or one captured from
					// an enclosing function's parameters: the closure
					// given to RunTransaction calls the caller's fn)
					// while a transaction is open.
					if owner, i := r.capturedParam(fn, c.Value); owner != nil && r.sums[owner].Runner < 0 {
						r.sums[owner].Runner, changed = i, true
					}
				}
				if k := r.RunnerArg(c); k >= 0 {
					if owner, i := r.capturedParam(fn, c.Args[k]); owner != nil && r.sums[owner].Runner < 0 {
						if _, isFunc := owner.Params[i].Type().Underlying().(*types.Signature); isFunc {
							r.sums[owner].Runner, changed = i, true
						}
					}
				}
			}
		}
	}
	return changed
}

// capturedParam resolves v, a value of fn, to a parameter of fn or of a
// function enclosing fn (through the free variables of closures), and
// returns that function and the parameter's index, or nil.
func (r *Result) capturedParam(fn *ssa.Function, v ssa.Value) (*ssa.Function, int) {
	for depth := 0; depth < 8 && fn != nil; depth++ {
		v = unwrap(v)
		if i := paramIndex(fn, v); i >= 0 {
			if r.sums[fn] == nil {
				return nil, -1
			}
			return fn, i
		}
		byRef := false
		if u, ok := v.(*ssa.UnOp); ok && u.Op == token.MUL {
			v, byRef = u.X, true // captured variables are cells
		}
		fv, ok := v.(*ssa.FreeVar)
		if !ok || fn.Parent() == nil {
			return nil, -1
		}
		idx := -1
		for i, f := range fn.FreeVars {
			if f == fv {
				idx = i
			}
		}
		var bound ssa.Value
		for _, b := range fn.Parent().Blocks {
			for _, instr := range b.Instrs {
				if mc, ok := instr.(*ssa.MakeClosure); ok && mc.Fn == fn && idx < len(mc.Bindings) {
					if bound != nil && bound != mc.Bindings[idx] {
						return nil, -1
					}
					bound = mc.Bindings[idx]
				}
			}
		}
		if bound == nil {
			return nil, -1
		}
		if al, ok := bound.(*ssa.Alloc); ok && byRef {
			bound = nil
			for _, ref := range *al.Referrers() {
				if st, ok := ref.(*ssa.Store); ok && st.Addr == al {
					if bound != nil {
						return nil, -1 // assigned more than once
					}
					bound = st.Val
				}
			}
			if bound == nil {
				return nil, -1
			}
		} else if byRef {
			// a cell captured from further out: load it there
			if fv2, ok := bound.(*ssa.FreeVar); ok {
				fn, v = fn.Parent(), &ssa.UnOp{Op: token.MUL, X: fv2}
				continue
			}
			return nil, -1
		}
		fn, v = fn.Parent(), bound
	}
	return nil, -1
}

func (r *Result) export() {
	for _, fn := range r.SSA.SrcFuncs {
		obj, ok := fn.Object().(*types.Func)
		if !ok || fn.Parent() != nil || obj.Pkg() != r.Pass.Pkg {
			continue
		}
		s := r.sums[fn]
		if r.cfg.Recording && r.cfg.Program != nil && fn.Signature.Recv() != nil {
			ms := &MethodSummary{Runner: s.Runner, Writes: s.Writes, Begins: s.Begins, Ends: s.Ends, Status: s.Status}
			if s.Net != nil {
				ms.Net = &NetIO{Chain: s.Net.Chain, Leaf: s.Net.Leaf, Handoff: s.Net.Handoff}
			} else {
				ms.Via = invokedBy(fn) // a decorator's (see judgeNet, delegates)
				ms.Spawns = r.spawnedBy(fn)
			}
			if s.MayIO != nil {
				ms.MayIO = &NetIO{Chain: s.MayIO.Chain, Leaf: s.MayIO.Leaf, Handoff: s.MayIO.Handoff}
			}
			if s.TokenDel != nil {
				ms.TokenDel = &TokenDelete{Chain: s.TokenDel.Chain}
			}
			r.cfg.Program.record(obj, ms)
		}
		if s.Net != nil {
			r.Pass.ExportObjectFact(obj, &NetIO{Chain: s.Net.Chain, Leaf: s.Net.Leaf, Handoff: s.Net.Handoff})
		}
		if s.Runner >= 0 {
			r.Pass.ExportObjectFact(obj, &TxRunner{Param: s.Runner})
		}
		if s.Timeout {
			r.Pass.ExportObjectFact(obj, &TimeoutCheck{})
		}
		if s.Fail != nil && !s.Timeout {
			r.Pass.ExportObjectFact(obj, &FailAction{What: s.Fail.What, Chain: s.Fail.Chain})
		}
		if s.Status != nil {
			r.Pass.ExportObjectFact(obj, s.Status)
		}
		if s.Sets != nil {
			r.Pass.ExportObjectFact(obj, s.Sets)
		}
		if s.TokenDel != nil {
			r.Pass.ExportObjectFact(obj, &TokenDelete{Chain: s.TokenDel.Chain})
		}
		if s.Claim {
			r.Pass.ExportObjectFact(obj, &TokenClaim{})
		}
		if s.Begins {
			r.Pass.ExportObjectFact(obj, &BeginsTx{})
		}
		if s.NoReturn {
			r.Pass.ExportObjectFact(obj, &NoReturn{})
		}
		if !s.Ends.empty() {
			r.Pass.ExportObjectFact(obj, &ClosesTx{Params: s.Ends.Always, OnErr: s.Ends.OnErr, OnArg: s.Ends.OnArg})
		}
		if len(s.CallsParam) > 0 {
			var ps []int
			for i := range fn.Params {
				if s.CallsParam[i] {
					ps = append(ps, i)
				}
			}
			r.Pass.ExportObjectFact(obj, &CallsParams{Params: ps})
		}
	}
}

// Effect names, neutrally, what the remote call of a chain may be: "an
// email", "an SMS", "a charge", "a webhook", "a push notification", "a
// gRPC call", "a Redis command" or "a remote call".
func Effect(p *Path) string {
	all := strings.ToLower(strings.Join(p.Chain, " "))
	leaf := strings.ToLower(p.Chain[len(p.Chain)-1])
	switch {
	case strings.Contains(leaf, "smtp") || strings.Contains(all, "mail"):
		return "an email"
	case strings.Contains(all, "sms") || strings.Contains(all, "twilio") || strings.Contains(all, "otp") || strings.Contains(all, "phone"):
		return "an SMS"
	case strings.Contains(all, "charge") || strings.Contains(all, "payment") || strings.Contains(all, "capture") ||
		strings.Contains(all, "refund") || strings.Contains(all, "payout") || strings.Contains(all, "transfer") || strings.Contains(all, "invoice"):
		return "a charge"
	case strings.Contains(all, "hook"):
		return "a webhook"
	case strings.Contains(all, "push") || strings.Contains(all, "notif"):
		return "a notification"
	case strings.Contains(leaf, "redis."):
		return "a Redis command"
	case strings.Contains(all, "grpc") || strings.HasSuffix(leaf, ").invoke") || strings.HasSuffix(leaf, ").newstream"):
		return "a gRPC call"
	case strings.Contains(leaf, "http."):
		return "an HTTP request"
	}
	return "a remote call"
}

// opaqueIO reports I/O that the analysis cannot follow: a cgo call (a
// binding of a C library that talks to the network), or a send on a
// channel (a hand-off to a background worker whose loop is out of sight),
// directly or through a helper of the package.
func (r *Result) opaqueIO(instr ssa.Instruction) *Path {
	leaf := func(what string, pos token.Pos) *Path {
		return &Path{Chain: []string{what}, Leaf: r.PosString(pos), LeafPos: pos}
	}
	switch in := instr.(type) {
	case *ssa.Send:
		p := leaf("a send on a channel (a hand-off to a worker)", in.Pos())
		p.Handoff = "a send on a channel at " + p.Leaf
		return p
	case *ssa.Select:
		for _, st := range in.States {
			if st.Dir == types.SendOnly {
				p := leaf("a send on a channel (a hand-off to a worker)", st.Pos)
				p.Handoff = "a send on a channel at " + p.Leaf
				return p
			}
		}
	case ssa.CallInstruction:
		c := in.Common()
		sf := StaticFn(c)
		if sf == nil {
			return nil
		}
		if name := sf.Name(); strings.HasPrefix(name, "_Cfunc_") {
			return leaf("C."+strings.TrimPrefix(name, "_Cfunc_")+" (cgo)", r.CallStart(c.Pos()))
		}
		if s := r.local(sf); s != nil && s.MayIO != nil {
			return pathVia(DisplayName(sf), s.MayIO, sf.Pos(), true)
		}
	}
	return nil
}

// dbWrite reports whether c writes to a database: SQL that inserts,
// updates or deletes (or an Exec of text not known), an ORM write, or a
// helper of the package that does one.
func (r *Result) dbWrite(c *ssa.CallCommon) bool {
	if q, ok := r.SQLOf(c); ok {
		return reInsert.MatchString(q) || reUpdate.MatchString(q) || reDelete.MatchString(q)
	}
	if fn := CalleeObj(c); fn != nil {
		if sqlMethod(fn) && strings.Contains(fn.Name(), "Exec") {
			return true
		}
		if ormPkg(fn) && (ormRowWrites[fn.Name()] || fn.Name() == "Delete") {
			return true
		}
	}
	if sf := StaticFn(c); sf != nil {
		if s := r.local(sf); s != nil {
			return s.Writes
		}
	}
	return false
}

// invokedBy returns the interface methods fn (and the closures it makes)
// calls, once each.
func invokedBy(fn *ssa.Function) []invokedMethod {
	var out []invokedMethod
	seen := map[string]bool{}
	var visit func(f *ssa.Function)
	visit = func(f *ssa.Function) {
		for _, b := range f.Blocks {
			for _, instr := range b.Instrs {
				ci, ok := instr.(ssa.CallInstruction)
				if !ok {
					continue
				}
				if it := ifaceOf(ci.Common()); it != nil {
					want := ifaceText(it)
					k := wantKey(want) + "|" + ci.Common().Method.Name()
					if !seen[k] {
						seen[k] = true
						out = append(out, invokedMethod{want: want, name: ci.Common().Method.Name()})
					}
				}
			}
		}
		for _, af := range f.AnonFuncs {
			visit(af)
		}
	}
	visit(fn)
	return out
}

// spawnedBy returns the interface methods called by the goroutines that fn
// starts (go g(..), g a function of fn's package), found through the
// static calls of g within the package (a worker's Run calling a
// Webhook's Trigger): the first pass cannot resolve them, judgeNet does.
func (r *Result) spawnedBy(fn *ssa.Function) []spawnedCall {
	var out []spawnedCall
	seen := map[string]bool{}
	var starts func(f *ssa.Function)
	starts = func(f *ssa.Function) {
		for _, b := range f.Blocks {
			for _, instr := range b.Instrs {
				g, ok := instr.(*ssa.Go)
				if !ok {
					continue
				}
				if sf := StaticFn(g.Common()); sf != nil && sf.Pkg == fn.Pkg {
					out = r.invokedUnder(sf, r.PosString(g.Pos()), out, seen)
				}
			}
		}
		for _, af := range f.AnonFuncs {
			starts(af)
		}
	}
	starts(fn)
	return out
}

// invokedUnder appends to out the interface methods called by g or by the
// functions of its package it calls (breadth first, each function once,
// up to 8 calls deep), with the chain of functions that leads to each.
func (r *Result) invokedUnder(g *ssa.Function, at string, out []spawnedCall, seen map[string]bool) []spawnedCall {
	type item struct {
		fn    *ssa.Function
		chain []string
	}
	visited := map[*ssa.Function]bool{g: true}
	queue := []item{{g, []string{DisplayName(g)}}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		var walk func(f *ssa.Function)
		walk = func(f *ssa.Function) {
			for _, b := range f.Blocks {
				for _, instr := range b.Instrs {
					ci, ok := instr.(ssa.CallInstruction)
					if !ok {
						continue
					}
					c := ci.Common()
					if iface := ifaceOf(c); iface != nil {
						want := ifaceText(iface)
						k := wantKey(want) + "|" + c.Method.Name()
						if !seen[k] {
							seen[k] = true
							out = append(out, spawnedCall{invokedMethod: invokedMethod{want: want, name: c.Method.Name()},
								at: at, chain: it.chain, display: FuncName(c.Method)})
						}
						continue
					}
					if sf := StaticFn(c); sf != nil && sf.Pkg == g.Pkg && !visited[sf] && len(it.chain) < 8 {
						visited[sf] = true
						queue = append(queue, item{sf, append(append([]string{}, it.chain...), DisplayName(sf))})
					}
				}
			}
			for _, af := range f.AnonFuncs {
				walk(af)
			}
		}
		walk(it.fn)
	}
	return out
}

// returnsBegun reports whether fn is a begin helper: its first result is
// a transaction (or a gorm/pop handle), at most an error follows, and
// every return hands back a transaction begun in it (by a Begin call or
// another begin helper) or nil.
func (r *Result) returnsBegun(fn *ssa.Function) bool {
	res := fn.Signature.Results()
	if res.Len() < 1 || res.Len() > 2 || !r.TxOrConn(res.At(0).Type()) {
		return false
	}
	if res.Len() == 2 && !types.Identical(res.At(1).Type(), errorType) {
		return false
	}
	begun := false
	for _, b := range fn.Blocks {
		ret, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return)
		if !ok || len(ret.Results) == 0 {
			continue
		}
		switch v := r.begunValue(ret.Results[0], 0); {
		case v == nil:
			return false
		case v == nilTx:
		default:
			begun = true
		}
	}
	return begun
}

// nilTx stands for a nil (or zero) transaction returned on an error path.
var nilTx = &ssa.Const{}

// begunValue follows v back to the Begin call that made it (returned as
// is), nilTx for a nil constant, or nil.
func (r *Result) begunValue(v ssa.Value, depth int) ssa.Value {
	if depth > 8 {
		return nil
	}
	switch x := v.(type) {
	case *ssa.Const:
		if x.Value == nil { // nil, or the zero value of a struct (bun.Tx{})
			return nilTx
		}
	case *ssa.ChangeType:
		return r.begunValue(x.X, depth+1)
	case *ssa.MakeInterface:
		return r.begunValue(x.X, depth+1)
	case *ssa.ChangeInterface:
		return r.begunValue(x.X, depth+1)
	case *ssa.Extract:
		if call, ok := x.Tuple.(*ssa.Call); ok && x.Index == 0 && r.IsBegin(&call.Call) {
			return call
		}
	case *ssa.Call:
		if r.IsBegin(&x.Call) {
			return x
		}
		// gorm: db.Begin().WithContext(ctx) keeps the transaction
		if fn := CalleeObj(&x.Call); fn != nil && IsConnTx(x.Type()) && len(x.Call.Args) > 0 && !x.Call.IsInvoke() {
			if fn.Name() == "WithContext" || fn.Name() == "Session" {
				return r.begunValue(x.Call.Args[0], depth+1)
			}
		}
	case *ssa.Phi:
		var got ssa.Value
		for _, e := range x.Edges {
			w := r.begunValue(e, depth+1)
			if w == nil {
				return nil
			}
			if w != nilTx {
				got = w
			}
		}
		if got == nil {
			return nilTx
		}
		return got
	}
	return nil
}

// beginHelper: c calls a begin helper (see [BeginsTx]).
func (r *Result) beginHelper(c *ssa.CallCommon, fn *types.Func) bool {
	if it := ifaceOf(c); it != nil {
		return r.resolving() && r.cfg.Program.invokeBegins(it, c.Method)
	}
	sf := StaticFn(c)
	if sf == nil {
		return false
	}
	if s := r.local(sf); s != nil {
		return s.Begins
	}
	if fn.Origin() != nil {
		fn = fn.Origin()
	}
	var f BeginsTx
	return r.Pass.ImportObjectFact(fn, &f)
}

// refusals are the gRPC codes with which a server refuses a request
// before doing any of it: InvalidArgument, NotFound, PermissionDenied,
// FailedPrecondition, OutOfRange, Unimplemented, Unauthenticated.
var refusals = map[uint64]bool{3: true, 5: true, 7: true, 9: true, 11: true, 12: true, 16: true}

// RefusalEdge returns the index of b's successor taken when b's branch
// finds a gRPC code that refuses the request (status.Code(err) ==
// codes.InvalidArgument, a case of a switch on it), or -1. What follows
// that edge tells a definite failure apart: the remote side did nothing.
func RefusalEdge(b *ssa.BasicBlock) int {
	if len(b.Instrs) == 0 || len(b.Succs) != 2 {
		return -1
	}
	iff, ok := b.Instrs[len(b.Instrs)-1].(*ssa.If)
	if !ok {
		return -1
	}
	cond, ok := iff.Cond.(*ssa.BinOp)
	if !ok || cond.Op != token.EQL && cond.Op != token.NEQ {
		return -1
	}
	if !refusalCode(cond.X) && !refusalCode(cond.Y) {
		return -1
	}
	if cond.Op == token.EQL {
		return 0
	}
	return 1
}

func refusalCode(v ssa.Value) bool {
	c, ok := v.(*ssa.Const)
	if !ok || c.Value == nil || c.Value.Kind() != constant.Int {
		return false
	}
	if p, n := rulekit.NamedOf(c.Type()); p != pkgCodes || n != "Code" {
		return false
	}
	x, _ := constant.Uint64Val(c.Value)
	return refusals[x]
}

// buildsTokenKeys reports whether fn builds idempotency keys: its first
// result is a string and what a return hands back is named so (a constant
// "idempotency:" prefix, an idem_ helper), so a key it made is one.
func buildsTokenKeys(fn *ssa.Function) bool {
	res := fn.Signature.Results()
	if res.Len() == 0 {
		return false
	}
	if b, ok := res.At(0).Type().Underlying().(*types.Basic); !ok || b.Info()&types.IsString == 0 {
		return false
	}
	for _, b := range fn.Blocks {
		if ret, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return); ok && len(ret.Results) > 0 {
			var ws []string
			words(ret.Results[0], 0, &ws)
			if strongTokenWords(ws) {
				return true
			}
		}
	}
	return false
}

// builtKey reports whether an argument of c is a key made by a function
// of the package that builds idempotency keys.
func (r *Result) builtKey(c *ssa.CallCommon) bool {
	for _, a := range c.Args {
		if call, ok := unwrap(a).(*ssa.Call); ok {
			if sf := StaticFn(&call.Call); sf != nil {
				if s := r.local(sf); s != nil && s.KeyBuilder {
					return true
				}
			}
		}
	}
	return false
}

// namedTokenDelete: fn, a function of the service named for deleting an
// idempotency key (deleteIdempotencyKey, releaseIdemToken), deletes
// through a call shaped like a delete (a repository's Del, Delete or
// Remove, a go-redis Del or Unlink, SQL DELETE) whatever its key is
// called: the helper's name says what the key is.
func (r *Result) namedTokenDelete(fn *ssa.Function) *Path {
	obj, ok := fn.Object().(*types.Func)
	if !ok || !strongTokenWords([]string{obj.Name()}) || !r.sameModule(obj) ||
		!reDeleteName.MatchString(obj.Name()) {
		return nil
	}
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			ci, ok := instr.(ssa.CallInstruction)
			if !ok {
				continue
			}
			c := ci.Common()
			fo := CalleeObj(c)
			if fo == nil {
				continue
			}
			del := false
			switch cmd := redisCmd(c); {
			case cmd != "":
				del = cmd == "Del" || cmd == "Unlink" || cmd == "HDel" || cmd == "GetDel"
			default:
				if q, ok := r.SQLOf(c); ok {
					del = reDelete.MatchString(q)
				} else if sig := fo.Type().(*types.Signature); sig.Recv() != nil {
					del = genericDel.MatchString(fo.Name())
				}
			}
			if del {
				return &Path{Chain: []string{FuncName(fo)}, Leaf: r.PosString(r.CallStart(c.Pos())), LeafPos: c.Pos()}
			}
		}
	}
	return nil
}
