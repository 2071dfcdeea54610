package blindupdate

import (
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Callers' row locks (the standalone command only, through facts.Program).
//
// A repository helper (UpdateIntentStatus(ctx, tx, id, status): UPDATE ..
// SET status = $1 WHERE id = $2) is blind when judged alone, but not when
// every caller in the loaded program locks the row in the same transaction
// before the call (GetIntentByIDForUpdate(ctx, tx, id): SELECT .. FOR
// UPDATE, directly, through a helper or an interface method whose
// implementations all do) and checks the locked row's state under the lock
// (if intent.Status == "succeeded" ...): the transition is then serialized
// by the lock. The first pass records the lockers, the blind helpers and
// the calls; the second judges each helper with all of its calls.

// program returns the whole-program view and whether this is its first
// (recording) pass, or nil.
func (c *checker) program() (*facts.Program, bool) {
	if c.cfg.Facts == nil || c.cfg.Facts.Config.Program == nil {
		return nil, false
	}
	return c.cfg.Facts.Config.Program, c.cfg.Facts.Config.Recording
}

// record records the package's lockers, and its calls of the program's
// functions with the row locks held at each.
func (c *checker) record(prog *facts.Program, files []*ast.File) {
	pkg := c.pass.Pkg.Path()
	for fn, tables := range c.lockers {
		prog.RecordLocker(pkg, fn, tables)
	}
	info := c.pass.TypesInfo
	cands := map[ast.Node][]lockCand{}
	names := map[ast.Node]string{}
	rulekit.WalkStack(files, func(n ast.Node, stack rulekit.Stack) {
		switch n := n.(type) {
		case *ast.CallExpr:
			fn := rulekit.Callee(info, n)
			if fn == nil || fn.Pkg() == nil {
				return
			}
			if len(n.Args) == 0 {
				return // no key to take: never judged by its callers
			}
			iface := recvInterface(fn)
			fnNode := stack.Func()
			body := rulekit.Body(fnNode)
			if _, ok := names[fnNode]; !ok {
				names[fnNode] = funcName(info, fnNode)
			}
			posn := c.pass.Fset.Position(n.Pos())
			lc := facts.LockedCall{File: filepath.Base(posn.Filename), Line: posn.Line, Col: posn.Column, Caller: names[fnNode]}
			if body != nil {
				if _, ok := cands[body]; !ok {
					cands[body] = c.lockCands(body)
				}
				c.lockedAt(body, n, cands[body], &lc)
			}
			prog.RecordCall(pkg, fn, iface, lc)
		case *ast.Ident:
			fn, ok := info.Uses[n].(*types.Func)
			if !ok || fn.Pkg() == nil {
				return
			}
			// A function used as a value: not the Fun of a call.
			x := ast.Node(n)
			parent := stack.Parent()
			if sel, ok := parent.(*ast.SelectorExpr); ok && sel.Sel == n {
				x = sel
				if len(stack) >= 3 {
					parent = stack[len(stack)-3]
				}
			}
			if call, ok := parent.(*ast.CallExpr); ok && ast.Unparen(call.Fun) == x {
				return
			}
			if _, ok := parent.(*ast.FuncDecl); ok {
				return
			}
			prog.RecordEscape(pkg, fn, recvInterface(fn))
		}
	})
}

// recvInterface returns the interface of an interface method, or nil.
func recvInterface(fn *types.Func) *types.Interface {
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return nil
	}
	it, _ := sig.Recv().Type().Underlying().(*types.Interface)
	return it
}

func funcName(info *types.Info, n ast.Node) string {
	if fd, ok := n.(*ast.FuncDecl); ok {
		if fn, ok := info.Defs[fd.Name].(*types.Func); ok {
			return rulekit.ShortName(fn)
		}
		return fd.Name.Name
	}
	return "a function literal"
}

// lockCand is a call of a function body that may lock a row, with the
// variable its result is assigned to.
type lockCand struct {
	call *ast.CallExpr
	ref  facts.LockRef
	row  types.Object // the locked row's value (v in v, err := lock(..))
	args map[types.Object]int
}

// lockCands returns the calls of body that lock a row (by SQL, a gorm
// locking clause, a known locker) or may (an interface method), whose
// result is assigned to a variable whose state is compared after it.
func (c *checker) lockCands(body *ast.BlockStmt) []lockCand {
	info := c.pass.TypesInfo
	var out []lockCand
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 || len(as.Lhs) == 0 {
			return true
		}
		k, ok := ast.Unparen(as.Rhs[0]).(*ast.CallExpr)
		if !ok {
			return true
		}
		id, ok := as.Lhs[0].(*ast.Ident)
		if !ok || id.Name == "_" {
			return true
		}
		row := info.ObjectOf(id)
		if row == nil {
			return true
		}
		var ref facts.LockRef
		if t := c.locks(k); len(t) > 0 {
			ref = facts.LockRef{Tables: t}
		} else if fn := rulekit.Callee(info, k); fn != nil && recvInterface(fn) != nil {
			ref = facts.InterfaceLock(recvInterface(fn), fn)
		} else {
			return true
		}
		if !stateCheck(c, info, body, row, k.End(), body.End()) {
			return true // its row's state is never compared: not a lock the caller relies on
		}
		out = append(out, lockCand{call: k, ref: ref, row: row, args: argObjs(info, k)})
		return true
	})
	return out
}

// lockedAt fills lc with the candidates that hold a lock at call: made
// before it, in the same transaction (a variable other than a context given
// to both, not committed or rolled back in between), the locked row's
// state read in a comparison between them.
func (c *checker) lockedAt(body *ast.BlockStmt, call *ast.CallExpr, cands []lockCand, lc *facts.LockedCall) {
	if len(cands) == 0 {
		return
	}
	info := c.pass.TypesInfo
	callArgs := argObjs(info, call)
	for _, k := range cands {
		if k.call.End() > call.Pos() {
			continue
		}
		kArgs := k.args
		var tx types.Object
		for o := range kArgs {
			if _, ok := callArgs[o]; ok && txVar(o) {
				tx = o
			}
		}
		if tx == nil || endsBetween(info, body, tx, k.call.End(), call.Pos()) ||
			!stateCheck(c, info, body, k.row, k.call.End(), call.Pos()) {
			continue
		}
		var rooted, same uint64
		for i, a := range call.Args {
			if i >= 64 {
				break
			}
			if root := rootIdent(a); root != nil && info.ObjectOf(root) == k.row && root != ast.Unparen(a) {
				rooted |= 1 << i
			}
			if id, ok := ast.Unparen(a).(*ast.Ident); ok {
				if o := info.ObjectOf(id); o != nil && o != tx {
					if _, ok := kArgs[o]; !ok {
						continue
					}
					same |= 1 << i
				}
			}
		}
		lc.Locks = append(lc.Locks, k.ref)
		lc.Rooted = append(lc.Rooted, rooted)
		lc.Same = append(lc.Same, same)
	}
}

// argObjs maps the variables given as plain arguments of call to their
// index.
func argObjs(info *types.Info, call *ast.CallExpr) map[types.Object]int {
	out := map[types.Object]int{}
	for i, a := range call.Args {
		if id, ok := ast.Unparen(a).(*ast.Ident); ok {
			if o, ok := info.ObjectOf(id).(*types.Var); ok {
				out[o] = i
			}
		}
	}
	return out
}

// txVar reports whether v holds a transaction, in which a row lock lasts
// until the commit: its type is one (*sql.Tx, pgx.Tx, ..) or is named like
// one (an application's DBTransaction), or it is an ORM handle that may be
// one (*gorm.DB) named like one (tx). A pool or a connection is not: a
// FOR UPDATE outside a transaction ends with its statement.
func txVar(v types.Object) bool {
	t := v.Type()
	if facts.IsTxType(t) {
		return true
	}
	_, n := rulekit.NamedOf(t)
	n = strings.ToLower(n)
	if strings.HasSuffix(n, "tx") || strings.Contains(n, "transaction") {
		return true
	}
	return facts.IsConnTx(t) && strings.Contains(strings.ToLower(v.Name()), "tx")
}

// rootIdent returns the variable a selector chain starts from (v in
// v.A.B), or nil.
func rootIdent(e ast.Expr) *ast.Ident {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.Ident:
			return x
		case *ast.SelectorExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// endsBetween reports whether tx is committed or rolled back (tx.Commit,
// tx.Rollback, or a call given tx whose name says so) between from and to,
// on the way to "to": an end in a block that returns (if done { return
// tx.Commit(ctx) }) and does not hold "to" does not count.
func endsBetween(info *types.Info, body *ast.BlockStmt, tx types.Object, from, to token.Pos) bool {
	found := false
	walk(body, func(n ast.Node, stack []ast.Node) {
		k, ok := n.(*ast.CallExpr)
		if !ok || found || k.Pos() < from || k.Pos() > to {
			return
		}
		sel, ok := ast.Unparen(k.Fun).(*ast.SelectorExpr)
		if !ok {
			return
		}
		name := sel.Sel.Name
		if !strings.HasPrefix(name, "Commit") && !strings.HasPrefix(name, "Rollback") {
			return
		}
		ends := false
		if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok && info.ObjectOf(id) == tx {
			ends = true
		}
		for _, a := range k.Args {
			if id, ok := ast.Unparen(a).(*ast.Ident); ok && info.ObjectOf(id) == tx {
				ends = true
			}
		}
		if !ends {
			return
		}
		for i := len(stack) - 1; i >= 0; i-- {
			b, ok := stack[i].(*ast.BlockStmt)
			if !ok || b == body {
				continue
			}
			if len(b.List) > 0 && !(to >= b.Pos() && to < b.End()) {
				if _, ret := b.List[len(b.List)-1].(*ast.ReturnStmt); ret {
					return // a path that returns
				}
			}
			break
		}
		found = true
	})
	return found
}

// stateCheck reports whether a state field of row (row.Status, row.State)
// is compared (==, !=, a switch on it) between from and to.
func stateCheck(c *checker, info *types.Info, body *ast.BlockStmt, row types.Object, from, to token.Pos) bool {
	isState := func(e ast.Expr) bool {
		sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if !ok || !c.stateField(sel.Sel.Name) {
			return false
		}
		root := rootIdent(sel.X)
		return root != nil && info.ObjectOf(root) == row
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found || n == nil || n.Pos() < from && n.End() < from || n.Pos() > to {
			return !found
		}
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Pos() > from && (n.Op == token.EQL || n.Op == token.NEQ) && (isState(n.X) || isState(n.Y)) {
				found = true
			}
		case *ast.SwitchStmt:
			if n.Pos() > from && n.Tag != nil && isState(n.Tag) {
				found = true
			}
		}
		return !found
	})
	return found
}

// keyParam returns the index of the parameter of fd that call binds to
// the WHERE's one key placeholder, or -1.
func keyParam(info *types.Info, fd *ast.FuncDecl, call *ast.CallExpr, u *update) int {
	qi := queryIndex(info, call)
	if fd == nil || qi < 0 || call.Ellipsis.IsValid() {
		return -1
	}
	parts := reAnd.Split(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(u.where), ";")), -1)
	if len(parts) != 1 {
		return -1
	}
	m := reEq.FindStringSubmatch(strings.TrimSpace(parts[0]))
	if m == nil {
		return -1
	}
	arg := -1
	switch v := m[2]; {
	case v == "?":
		arg = qi + 1 + u.setMarks
	case reDollar.MatchString(v):
		n := 0
		for _, ch := range v[1:] {
			n = n*10 + int(ch-'0')
		}
		arg = qi + n
	}
	if arg < 0 || arg >= len(call.Args) {
		return -1
	}
	id, ok := ast.Unparen(call.Args[arg]).(*ast.Ident)
	if !ok {
		return -1
	}
	obj := info.ObjectOf(id)
	i := 0
	for _, f := range fd.Type.Params.List {
		for _, name := range f.Names {
			if info.Defs[name] == obj {
				return i
			}
			i++
		}
		if len(f.Names) == 0 {
			i++
		}
	}
	return -1
}

// walk is ast.Inspect of root with the stack of enclosing nodes (n last).
func walk(root ast.Node, visit func(n ast.Node, stack []ast.Node)) {
	var stack []ast.Node
	ast.Inspect(root, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		visit(n, stack)
		return true
	})
}
