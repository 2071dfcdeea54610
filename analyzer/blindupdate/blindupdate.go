// Package blindupdate defines an analyzer that reports a state transition
// written without compare-and-set: an UPDATE of a state/status column whose
// WHERE names only the key and whose affected-row count is ignored.
package blindupdate

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "blindupdate"

// Doc documents the analyzer.
const Doc = `report state transitions written without compare-and-set

An UPDATE that sets a state or status column (SQL text in a string literal
or constant, or in a variable, fmt.Sprintf or query-struct field the code
determines; a squirrel update builder; a sqlc-generated query method; or
gorm Model(x).Update("status", ..)/Updates), whose WHERE names only the
row's key, with no predicate on the
current state, a version or a lease, and whose affected-row count is
ignored, lets a duplicate request, a late worker or a reconciler overwrite a
state another one already moved on: a SUCCESS turned back to PROCESSING, a
refunded payment marked paid, and nothing notices. Write the transition as a
compare-and-set and check that exactly one row changed:
UPDATE t SET state = 'SUCCESS', version = version + 1
WHERE id = $1 AND state = 'PROCESSING' AND version = $2, then RowsAffected() == 1.

Suppress with //idemlint:ignore blindupdate <reason>.`

// Config configures a blindupdate analyzer.
type Config struct {
	// StateColumns are more column names that hold a state machine's state
	// (columns named state, status, *_state and *_status always do).
	StateColumns []string
	// Facts, when set, is the suite's shared facts analyzer: with its
	// Program (the standalone command), a helper whose every caller holds
	// a row lock on the row is not reported (see callers.go).
	Facts *facts.Facts
}

// Analyzer is the default blindupdate analyzer.
var Analyzer = New(Config{})

// BlindQuery marks a generated query method (sqlc) that runs a blind state
// transition. Count is the index of the result that carries the number of
// rows changed (an int64, sql.Result or pgconn.CommandTag), or -1 when the
// method drops it.
type BlindQuery struct {
	Query  string // the query constant's name
	SQL    string
	Table  string
	Column string
	Where  string
	Count  int
}

func (*BlindQuery) AFact() {}
func (f *BlindQuery) String() string {
	return fmt.Sprintf("blindquery(%s count=%d)", f.Query, f.Count)
}

// RowLocker marks a function that takes row locks before it returns
// (SELECT .. FOR UPDATE, gorm's Clauses(clause.Locking{Strength:
// "UPDATE"}), or a helper that does): Tables are the locked tables, "*"
// for a gorm lock (the model's table).
type RowLocker struct{ Tables []string }

func (*RowLocker) AFact()           {}
func (f *RowLocker) String() string { return fmt.Sprintf("rowlocker(%v)", f.Tables) }

// New returns a blindupdate analyzer for cfg.
func New(cfg Config) *analysis.Analyzer {
	c := &Config{StateColumns: append([]string(nil), cfg.StateColumns...), Facts: cfg.Facts}
	a := &analysis.Analyzer{
		Name:      Name,
		Doc:       Doc,
		URL:       "https://github.com/idemkit/idem/blob/main/docs/rules/blindupdate.md",
		FactTypes: []analysis.Fact{new(BlindQuery), new(RowLocker)},
		Run: func(pass *analysis.Pass) (any, error) {
			if rulekit.IsStd(pass.Fset, pass.Files) {
				return nil, nil
			}
			ch := &checker{pass: pass, cfg: c, rep: directive.New(pass, Name)}
			ch.run()
			return nil, nil
		},
	}
	a.Flags.Var(facts.ListFlag(&c.StateColumns), "columns", "more state/status column names, comma-separated")
	return a
}

type checker struct {
	pass    *analysis.Pass
	cfg     *Config
	rep     *directive.Reporter
	lockers map[*types.Func][]string // functions of the package that take row locks
}

// how a call's result (the affected-row count) is used.
type use int

const (
	unsure   use = iota // used in a way we cannot read: maybe checked
	ignored             // dropped, or only its error read
	returned            // handed to the caller
)

func (c *checker) run() {
	// Generated files first, so that their facts are known at the calls.
	var gen, own []*ast.File
	for _, f := range c.pass.Files {
		if ast.IsGenerated(f) {
			gen = append(gen, f)
		} else {
			own = append(own, f)
		}
	}
	c.findLockers()
	rulekit.WalkStack(gen, func(n ast.Node, stack rulekit.Stack) {
		if call, ok := n.(*ast.CallExpr); ok {
			c.generated(call, stack)
		}
	})
	rulekit.WalkStack(own, func(n ast.Node, stack rulekit.Stack) {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return
		}
		if !c.sqlCall(call, stack) && !c.queryMethod(call, stack) {
			c.gormCall(call, stack)
		}
	})
	if prog, recording := c.program(); prog != nil && recording {
		c.record(prog, own)
	}
}

// execUpdate returns the blind transition run by an Exec-shaped call.
func (c *checker) execUpdate(call *ast.CallExpr) (*update, string, token.Pos) {
	q, at, method, ok := rulekit.SQLCall(c.pass.TypesInfo, c.pass.Files, call)
	if !ok || !(strings.HasPrefix(method, "Exec") || strings.HasPrefix(method, "MustExec")) {
		return nil, "", token.NoPos
	}
	u := dropFlags(c.pass.TypesInfo, call, queryIndex(c.pass.TypesInfo, call), c.parseUpdate(q))
	if u == nil {
		return nil, "", token.NoPos
	}
	return u, q, at
}

// queryIndex returns the index of call's SQL text argument (the first
// string, as [rulekit.SQLCall] takes it), or -1 when the values are not
// call's arguments (a squirrel builder's Exec).
func queryIndex(info *types.Info, call *ast.CallExpr) int {
	if rulekit.PkgPath(rulekit.Callee(info, call)) == rulekit.PkgSquirrel {
		return -1
	}
	for i, a := range call.Args {
		if t := info.TypeOf(a); t != nil {
			if b, ok := t.Underlying().(*types.Basic); ok && b.Info()&types.IsString != 0 {
				return i
			}
		}
	}
	return -1
}

// generated exports a BlindQuery fact for a generated method that runs a
// blind transition.
func (c *checker) generated(call *ast.CallExpr, stack rulekit.Stack) {
	u, q, _ := c.execUpdate(call)
	if u == nil {
		return
	}
	fd, ok := stack.Func().(*ast.FuncDecl)
	if !ok {
		return
	}
	obj, _ := c.pass.TypesInfo.Defs[fd.Name].(*types.Func)
	if obj == nil || c.lockedBefore(stack, call, u.table) {
		return
	}
	count := -1
	if c.resultUse(call, stack, false) != ignored {
		count = 0
	}
	name := ""
	for _, a := range call.Args {
		if n := rulekit.ConstName(c.pass.TypesInfo, a); n != "" {
			name = n
			break
		}
	}
	c.pass.ExportObjectFact(obj, &BlindQuery{Query: name, SQL: q, Table: u.table, Column: u.column, Where: u.where, Count: count})
}

// sqlCall reports an Exec of a blind transition whose count is ignored.
func (c *checker) sqlCall(call *ast.CallExpr, stack rulekit.Stack) bool {
	u, q, at := c.execUpdate(call)
	if u == nil {
		return false
	}
	if c.resultUse(call, stack, false) != ignored || c.lockedBefore(stack, call, u.table) {
		return true
	}
	fn := rulekit.Callee(c.pass.TypesInfo, call)
	unlocked := ""
	if prog, recording := c.program(); prog != nil {
		fd, _ := stack.Func().(*ast.FuncDecl)
		var helper *types.Func
		if fd != nil {
			helper, _ = c.pass.TypesInfo.Defs[fd.Name].(*types.Func)
		}
		if recording {
			prog.RecordBlindHelper(c.pass.Pkg.Path())
		} else if helper != nil {
			ok, at := prog.CallersLock(helper, u.table, keyParam(c.pass.TypesInfo, fd, call, u))
			if ok {
				return true // every caller holds the row's lock and checked its state
			}
			if at != "" {
				unlocked = fmt.Sprintf(" (%s is called at %s with no row lock held on it)", rulekit.ShortName(helper), at)
			}
		}
	}
	msg := fmt.Sprintf("%s (called at %s) runs %q, a state transition without compare-and-set: it sets %s.%s with a WHERE on the key only (%s) and ignores how many rows changed%s, "+
		"so a duplicate or a late worker overwrites a state another one already moved on (a SUCCESS turned back, a refund marked paid) and nothing notices; "+
		"add the expected state (and version or lease) to the WHERE, e.g. WHERE %s AND %s = 'PROCESSING' AND version = $n, and check RowsAffected() == 1",
		rulekit.ShortName(fn), c.rep.Posn(call.Pos()), rulekit.Short(q, 120), u.table, u.column, u.where, unlocked, u.where, u.column)
	c.rep.Report(analysis.Diagnostic{Pos: call.Pos(), End: call.End(), Message: msg, Related: []analysis.RelatedInformation{
		{Pos: at, Message: "the UPDATE text: " + rulekit.Short(q, 120)},
		{Pos: call.Rparen, Message: "its affected-row count is dropped here"},
	}})
	return true
}

// queryMethod reports a call of a generated query method that runs a
// blind transition (sqlc), when the count is dropped by the method or by
// the caller.
func (c *checker) queryMethod(call *ast.CallExpr, stack rulekit.Stack) bool {
	fn := rulekit.Callee(c.pass.TypesInfo, call)
	if fn == nil {
		return false
	}
	var f BlindQuery
	if !c.pass.ImportObjectFact(fn, &f) {
		return false
	}
	var how string
	switch {
	case f.Count < 0:
		how = "the generated method drops the affected-row count (an :exec query)"
	case c.resultUse(call, stack, false) == ignored:
		how = "the count it returns is dropped here"
	default:
		return true
	}
	msg := fmt.Sprintf("%s (called at %s) runs the generated query %s (%q), a state transition without compare-and-set: it sets %s.%s with a WHERE on the key only (%s), and %s, "+
		"so a duplicate or a late worker overwrites a state another one already moved on and nothing notices; "+
		"add the expected state (and version or lease) to the query's WHERE, e.g. WHERE %s AND %s = 'PROCESSING', make it :execrows and check that it returns 1",
		rulekit.ShortName(fn), c.rep.Posn(call.Pos()), f.Query, rulekit.Short(f.SQL, 120), f.Table, f.Column, f.Where, how, f.Where, f.Column)
	c.rep.Report(analysis.Diagnostic{Pos: call.Pos(), End: call.End(), Message: msg, Related: []analysis.RelatedInformation{
		{Pos: fn.Pos(), Message: "the generated method: " + fn.Name()},
	}})
	return true
}

// resultUse tells how the first result of call (the affected-row count,
// or for gorm the *gorm.DB) is used.
func (c *checker) resultUse(call *ast.CallExpr, stack rulekit.Stack, gorm bool) use {
	info := c.pass.TypesInfo
	parent := stack.Parent()
	var lhs ast.Expr
	switch p := parent.(type) {
	case *ast.ExprStmt:
		return ignored
	case *ast.ReturnStmt:
		return returned
	case *ast.SelectorExpr:
		if gorm && p.Sel.Name == "Error" {
			return ignored
		}
		return unsure
	case *ast.AssignStmt:
		if len(p.Rhs) != 1 {
			return unsure
		}
		lhs = p.Lhs[0]
	case *ast.ValueSpec:
		if len(p.Values) != 1 || len(p.Names) == 0 {
			return unsure
		}
		lhs = p.Names[0]
	default:
		return unsure
	}
	id, ok := lhs.(*ast.Ident)
	if !ok {
		return unsure
	}
	if id.Name == "_" {
		return ignored
	}
	obj := info.ObjectOf(id)
	if obj == nil {
		return unsure
	}
	body := rulekit.Body(stack.Func())
	if body == nil {
		return unsure
	}
	ids, parents := rulekit.Uses(info, body, obj)
	for i := range ids {
		sel, ok := parents[i].(*ast.SelectorExpr)
		if gorm && ok && sel.Sel.Name == "Error" {
			continue
		}
		return unsure // read: maybe checked
	}
	return ignored
}

// lockedBefore reports whether the function locks a row of table before
// call (SELECT .. FOR UPDATE, gorm's Clauses(clause.Locking{Strength:
// "UPDATE"}), or a helper known to do one): the transition is then
// serialized. Table "*" (a gorm update) accepts any lock.
func (c *checker) lockedBefore(stack rulekit.Stack, call *ast.CallExpr, table string) bool {
	body := rulekit.Body(stack.Func())
	if body == nil {
		return false
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if k, ok := n.(*ast.CallExpr); ok && k.Pos() < call.Pos() {
			for _, t := range c.locks(k) {
				if t == "*" || table == "*" || baseTable(t) == baseTable(table) {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// locks returns the tables call k locks: by its SQL, a gorm Locking
// clause ("*"), or as a helper known to lock.
func (c *checker) locks(k *ast.CallExpr) []string {
	info := c.pass.TypesInfo
	if q, _, _, ok := rulekit.SQLCall(info, c.pass.Files, k); ok {
		if m := reForUpd.FindStringSubmatch(q); m != nil {
			return []string{m[1]}
		}
		return nil
	}
	fn := rulekit.Callee(info, k)
	if fn == nil {
		return nil
	}
	if rulekit.Is(fn, pkgGorm, "Clauses") {
		for _, a := range k.Args {
			if gormLocking(info, a) {
				return []string{"*"}
			}
		}
		return nil
	}
	if t, ok := c.lockers[fn]; ok {
		return t
	}
	var f RowLocker
	if fn.Pkg() != c.pass.Pkg && c.pass.ImportObjectFact(fn, &f) {
		return f.Tables
	}
	return nil
}

// gormLocking: e is a clause.Locking{Strength: "UPDATE"} (or "NO KEY
// UPDATE"): a lock that serializes writers, unlike SHARE.
func gormLocking(info *types.Info, e ast.Expr) bool {
	lit, ok := ast.Unparen(e).(*ast.CompositeLit)
	if !ok {
		return false
	}
	if p, n := rulekit.NamedOf(info.TypeOf(lit)); p != pkgGorm+"/clause" || n != "Locking" {
		return false
	}
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "Strength" {
				s, _, ok := rulekit.ConstString(info, kv.Value)
				return ok && strings.Contains(strings.ToUpper(s), "UPDATE")
			}
		}
	}
	return false
}

// findLockers finds the functions of the package that take row locks,
// through any number of helpers, and exports a RowLocker fact for each.
func (c *checker) findLockers() {
	c.lockers = map[*types.Func][]string{}
	rulekit.Fixpoint(c.pass.TypesInfo, c.pass.Files, 4, func(fd *ast.FuncDecl, fn *types.Func) bool {
		if c.lockers[fn] != nil {
			return false
		}
		var tables []string
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false
			}
			if k, ok := n.(*ast.CallExpr); ok {
				tables = append(tables, c.locks(k)...)
			}
			return true
		})
		if len(tables) == 0 {
			return false
		}
		c.lockers[fn] = tables
		return true
	})
	for fn, tables := range c.lockers {
		c.pass.ExportObjectFact(fn, &RowLocker{Tables: tables})
	}
}
