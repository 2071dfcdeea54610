// Package rulekit holds the syntax-level helpers shared by the rules
// blindupdate, checkthenact, serverkey and bypass: callee resolution,
// constant SQL text, the parents of a node, the uses of a variable, and
// the words that name an idempotency token.
package rulekit

import (
	"go/ast"
	"go/build"
	"go/constant"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// Callee returns the function or method called by call, or nil.
func Callee(info *types.Info, call *ast.CallExpr) *types.Func {
	f, _ := typeutil.Callee(info, call).(*types.Func)
	return f
}

// RecvNamed returns the package path and name of fn's receiver type
// (pointer stripped), or "", "".
func RecvNamed(fn *types.Func) (pkg, name string) {
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return "", ""
	}
	return NamedOf(sig.Recv().Type())
}

// NamedOf returns the package path and name of t (pointer stripped).
func NamedOf(t types.Type) (pkg, name string) {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil {
		return n.Obj().Pkg().Path(), n.Obj().Name()
	}
	return "", ""
}

// PkgPath is the path of fn's package, or "".
func PkgPath(fn *types.Func) string {
	if fn == nil || fn.Pkg() == nil {
		return ""
	}
	return fn.Pkg().Path()
}

// Is reports whether fn is pkg.name, a function or a method of any type of pkg.
func Is(fn *types.Func, pkg string, names ...string) bool {
	if PkgPath(fn) != pkg {
		return false
	}
	for _, n := range names {
		if fn.Name() == n {
			return true
		}
	}
	return false
}

// ShortName is the display name of fn: "(*sql.DB).ExecContext", "uuid.New".
func ShortName(fn *types.Func) string {
	sig, _ := fn.Type().(*types.Signature)
	if sig != nil && sig.Recv() != nil {
		t := sig.Recv().Type()
		ptr := ""
		if p, ok := t.(*types.Pointer); ok {
			ptr, t = "*", p.Elem()
		}
		if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil {
			return "(" + ptr + n.Obj().Pkg().Name() + "." + n.Obj().Name() + ")." + fn.Name()
		}
		return fn.Name()
	}
	if fn.Pkg() == nil {
		return fn.Name()
	}
	return fn.Pkg().Name() + "." + fn.Name()
}

// ConstString returns the constant string value of e and, when e names a
// declared constant, the position of its declaration (else e's position).
func ConstString(info *types.Info, e ast.Expr) (string, token.Pos, bool) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", token.NoPos, false
	}
	pos := e.Pos()
	var id *ast.Ident
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	}
	if id != nil {
		if c, ok := info.Uses[id].(*types.Const); ok && c.Pos().IsValid() {
			pos = c.Pos()
		}
	}
	return constant.StringVal(tv.Value), pos, true
}

// ConstName returns the name of the constant e refers to, or "".
func ConstName(info *types.Info, e ast.Expr) string {
	var id *ast.Ident
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	}
	if id != nil {
		if c, ok := info.Uses[id].(*types.Const); ok {
			return c.Name()
		}
	}
	return ""
}

// SQLCall returns the SQL text of a call to a method named
// Exec*/Query*/MustExec*/Get*/Select* (database/sql, pgx, sqlx and any
// wrapper of the same shape): the first string argument, when the code
// determines it (see [StringText]; files are the package's). at is the
// position of the SQL text (its constant's declaration, or the value its
// variable was defined with).
func SQLCall(info *types.Info, files []*ast.File, call *ast.CallExpr) (q string, at token.Pos, method string, ok bool) {
	fn := Callee(info, call)
	if fn == nil {
		return "", token.NoPos, "", false
	}
	n := fn.Name()
	if PkgPath(fn) == PkgSquirrel {
		sel, isSel := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !isSel || !strings.HasPrefix(n, "Exec") && !strings.HasPrefix(n, "Query") {
			return "", token.NoPos, "", false
		}
		q, at, ok = (&texter{info: info, files: files}).builder(sel.X, 0)
		if ok && strings.HasPrefix(n, "Query") && strings.HasPrefix(q, "UPDATE ") {
			return "", token.NoPos, "", false // an update's rows come back only with a Suffix, not read
		}
		return q, at, n, ok
	}
	if !(strings.HasPrefix(n, "Exec") || strings.HasPrefix(n, "Query") || strings.HasPrefix(n, "MustExec") ||
		n == "Get" || n == "GetContext" || n == "Select" || n == "SelectContext" || n == "Raw") {
		return "", token.NoPos, "", false
	}
	for _, a := range call.Args {
		t := info.TypeOf(a)
		if t == nil {
			continue
		}
		if b, isB := t.Underlying().(*types.Basic); isB && b.Info()&types.IsString != 0 {
			q, at, ok = StringText(info, files, a)
			return StripComments(q), at, n, ok
		}
	}
	return "", token.NoPos, "", false
}

var (
	reLineComment  = regexp.MustCompile(`--[^\n]*`)
	reBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	reSpace        = regexp.MustCompile(`\s+`)
)

// StripComments removes SQL comments and folds white space.
func StripComments(q string) string {
	q = reBlockComment.ReplaceAllString(q, " ")
	q = reLineComment.ReplaceAllString(q, " ")
	return strings.TrimSpace(reSpace.ReplaceAllString(q, " "))
}

// SplitTop splits s at sep outside parentheses and quotes.
func SplitTop(s string, sep byte) []string {
	var out []string
	start := 0
	scanTop(s, 0, func(i, depth int) bool {
		if s[i] == sep && depth == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
		return true
	})
	return append(out, s[start:])
}

// UntilClose returns s up to the parenthesis that closes one opened just
// before it (quotes respected), or false when none does.
func UntilClose(s string) (string, bool) {
	end := -1
	scanTop(s, 1, func(i, depth int) bool {
		if s[i] == ')' && depth == 0 {
			end = i
			return false
		}
		return true
	})
	if end < 0 {
		return "", false
	}
	return s[:end], true
}

// scanTop calls at with each index of s outside single quotes and the
// parenthesis depth after that byte (starting from depth), until at
// returns false.
func scanTop(s string, depth int, at func(i, depth int) bool) {
	quote := false
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\'':
			quote = !quote
			continue
		case quote:
			continue
		case ch == '(':
			depth++
		case ch == ')':
			depth--
		}
		if !at(i, depth) {
			return
		}
	}
}

// Short returns q cut to n bytes with an ellipsis.
func Short(q string, n int) string {
	if len(q) <= n {
		return q
	}
	return q[:n] + "..."
}

var (
	reStrongTok = regexp.MustCompile(`(?i)idempot|dedup|de_dup|nonce|idem[_:.-]|^idem$|idemkey|requestid|request_id|request-id`)
	reWeakTok   = regexp.MustCompile(`(?i)token`)
	reAuthTok   = regexp.MustCompile(`(?i)access|refresh|auth|oauth|session|jwt|bearer|api_?(key|token)|csrf|login|id_?token|device|push|reset|verif|invite|confirm`)
)

// TokenWords reports whether the words name an idempotency key, token or
// record: idempotency, idem, dedup, nonce, request id, or "token" when no
// word says it is an authentication token.
func TokenWords(ws ...string) bool {
	weak, auth := false, false
	for _, w := range ws {
		if reStrongTok.MatchString(w) {
			return true
		}
		weak = weak || reWeakTok.MatchString(w)
		auth = auth || reAuthTok.MatchString(w)
	}
	return weak && !auth
}

// Words returns the identifiers and constant string parts of e: what a
// key expression says about itself ("idem:" + req.Key gives "idem:", "req",
// "Key").
func Words(info *types.Info, e ast.Expr) []string {
	var ws []string
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.Ident:
			ws = append(ws, x.Name)
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				ws = append(ws, x.Value)
			}
		case ast.Expr:
			if s, _, ok := ConstString(info, x); ok {
				ws = append(ws, s)
			}
		}
		return true
	})
	return ws
}

// Stack is the chain of nodes from a file down to a node.
type Stack []ast.Node

// Parent returns the nearest parent that is not a parenthesis.
func (s Stack) Parent() ast.Node {
	for i := len(s) - 2; i >= 0; i-- {
		if _, ok := s[i].(*ast.ParenExpr); !ok {
			return s[i]
		}
	}
	return nil
}

// Func returns the innermost enclosing function body (a FuncDecl or FuncLit).
func (s Stack) Func() ast.Node {
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i].(type) {
		case *ast.FuncDecl, *ast.FuncLit:
			return s[i]
		}
	}
	return nil
}

// Body returns the body of a FuncDecl or FuncLit.
func Body(fn ast.Node) *ast.BlockStmt {
	switch f := fn.(type) {
	case *ast.FuncDecl:
		return f.Body
	case *ast.FuncLit:
		return f.Body
	}
	return nil
}

// WalkStack calls visit for every node of files with its stack of parents
// (the node last).
func WalkStack(files []*ast.File, visit func(n ast.Node, stack Stack)) {
	for _, f := range files {
		var stack Stack
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			visit(n, stack)
			return true
		})
	}
}

// Uses returns the identifiers in root that refer to obj, each with its
// parent node.
func Uses(info *types.Info, root ast.Node, obj types.Object) (ids []*ast.Ident, parents []ast.Node) {
	var stack []ast.Node
	ast.Inspect(root, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		if id, ok := n.(*ast.Ident); ok && info.Uses[id] == obj {
			ids = append(ids, id)
			var p ast.Node
			for i := len(stack) - 1; i >= 0; i-- {
				if _, paren := stack[i].(*ast.ParenExpr); !paren {
					p = stack[i]
					break
				}
			}
			parents = append(parents, p)
		}
		stack = append(stack, n)
		return true
	})
	return ids, parents
}

// IsGenerated reports whether the file holding pos is generated code.
func IsGenerated(files []*ast.File, fset *token.FileSet, pos token.Pos) bool {
	for _, f := range files {
		if f.FileStart <= pos && pos <= f.FileEnd {
			return ast.IsGenerated(f)
		}
	}
	return false
}

// FileOf returns the file of files holding pos.
func FileOf(files []*ast.File, pos token.Pos) *ast.File {
	for _, f := range files {
		if f.FileStart <= pos && pos <= f.FileEnd {
			return f
		}
	}
	return nil
}

// KeyWords is Words of e, with each local variable in e followed to the
// values assigned to it in body: key := "idem:" + id; rdb.Get(ctx, key)
// gives "key", "idem:", "id".
func KeyWords(info *types.Info, body ast.Node, e ast.Expr) []string {
	ws := Words(info, e)
	if body == nil {
		return ws
	}
	seen := map[types.Object]bool{}
	var follow func(e ast.Expr, depth int)
	follow = func(e ast.Expr, depth int) {
		if depth > 3 {
			return
		}
		ast.Inspect(e, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			v, ok := info.Uses[id].(*types.Var)
			if !ok || seen[v] || v.Parent() == nil || v.Parent() == v.Pkg().Scope() {
				return true
			}
			seen[v] = true
			for _, rhs := range Assigned(info, body, v) {
				ws = append(ws, Words(info, rhs)...)
				follow(rhs, depth+1)
			}
			return true
		})
	}
	follow(e, 0)
	return ws
}

// Assigned returns the expressions assigned to v in body (the call of a
// tuple assignment v, err := f() included).
func Assigned(info *types.Info, body ast.Node, v types.Object) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for i, l := range x.Lhs {
				if id, ok := l.(*ast.Ident); ok && info.ObjectOf(id) == v {
					switch {
					case len(x.Lhs) == len(x.Rhs):
						out = append(out, x.Rhs[i])
					case len(x.Rhs) == 1:
						out = append(out, x.Rhs[0]) // v, err := f()
					}
				}
			}
		case *ast.ValueSpec:
			if len(x.Names) == len(x.Values) {
				for i, id := range x.Names {
					if info.ObjectOf(id) == v {
						out = append(out, x.Values[i])
					}
				}
			}
		}
		return true
	})
	return out
}

var reRedisPkg = regexp.MustCompile(`^github\.com/(redis/go-redis|go-redis/redis)(/v\d+)?$`)

// IsRedis reports whether fn belongs to go-redis (v7 to v9, either path).
func IsRedis(fn *types.Func) bool { return reRedisPkg.MatchString(PkgPath(fn)) }

// IsRedisPkg reports whether path is a go-redis package path.
func IsRedisPkg(path string) bool { return reRedisPkg.MatchString(path) }

var goroot = filepath.Clean(build.Default.GOROOT) + string(filepath.Separator)

// IsStd reports whether the pass's package is in the standard library
// (its files are under GOROOT): nothing there is a service, so analyzers
// that export facts skip it.
func IsStd(fset *token.FileSet, files []*ast.File) bool {
	if len(files) == 0 {
		return true
	}
	return strings.HasPrefix(fset.File(files[0].Pos()).Name(), goroot)
}

// Snake turns a Go field or type name into its snake-case column name:
// PaymentStatus gives payment_status.
func Snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Fixpoint calls learn for each function declared with a body in files,
// round after round, until a round learns nothing (learn returns whether
// it did) or rounds have run: what helpers are known to do flows to their
// callers in the package, whatever the order of the declarations.
func Fixpoint(info *types.Info, files []*ast.File, rounds int, learn func(fd *ast.FuncDecl, fn *types.Func) bool) {
	for changed, round := true, 0; changed && round < rounds; round++ {
		changed = false
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if fn, _ := info.Defs[fd.Name].(*types.Func); fn != nil && learn(fd, fn) {
					changed = true
				}
			}
		}
	}
}
