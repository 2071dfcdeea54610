// Package checkthenact defines an analyzer that reports a non-atomic check
// of an idempotency key or record before acting: a SELECT (or a gorm
// First/Find/Count) followed, on the not-found path, by an INSERT of the
// same table without ON CONFLICT, and a go-redis Get/Exists followed by a
// Set of the same key without NX.
package checkthenact

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"reflect"
	"regexp"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "checkthenact"

// Doc documents the analyzer.
const Doc = `report a non-atomic check of an idempotency key before claiming it

Reading an idempotency key or record (SQL SELECT, gorm First/Take/Find/Count,
go-redis Get/Exists/HGet) and then, on the not-found path, writing it with a
plain INSERT (no ON CONFLICT), gorm Create (no clause.OnConflict) or go-redis
Set/HSet (no NX) lets two duplicates that arrive together both find nothing
and both go on: both run the effect (a double charge), or the second gets a
duplicate-key error that the client takes for a failure and retries. gorm
FirstOrCreate on such a record is the same SELECT then INSERT. Claim the key
in one atomic step and act only when the claim won: INSERT .. ON CONFLICT
(key) DO NOTHING and check that one row was inserted, SetNX / SET .. NX, or
Clauses(clause.OnConflict{DoNothing: true}).Create and check RowsAffected.

When an effect (a call that may do network I/O) runs between the check and
the write, tokenorder reports the effect instead; checkthenact stays silent.

Suppress with //idemlint:ignore checkthenact <reason>.`

// Config configures a checkthenact analyzer.
type Config struct {
	// Facts is the shared facts analyzer (to leave check-effect-write
	// orderings to tokenorder); nil means a private one.
	Facts *facts.Facts
	// Tables are more SQL tables holding idempotency keys or records.
	Tables []string
}

// Analyzer is the default checkthenact analyzer, using facts.Shared.
var Analyzer = New(Config{Facts: facts.Shared})

// New returns a checkthenact analyzer for cfg.
func New(cfg Config) *analysis.Analyzer {
	f := cfg.Facts
	if f == nil {
		f = facts.New(facts.Config{})
	}
	c := &Config{Facts: f, Tables: append([]string(nil), cfg.Tables...)}
	a := &analysis.Analyzer{
		Name:     Name,
		Doc:      Doc,
		URL:      "https://github.com/idemkit/idem/blob/main/docs/rules/checkthenact.md",
		Requires: []*analysis.Analyzer{f.Analyzer},
		Run: func(pass *analysis.Pass) (any, error) {
			ch := &checker{pass: pass, cfg: c, res: pass.ResultOf[f.Analyzer].(*facts.Result), rep: directive.New(pass, Name)}
			ch.run()
			return nil, nil
		},
	}
	a.Flags.Var(facts.ListFlag(&c.Tables), "tables", "more SQL tables holding idempotency keys or records, comma-separated")
	return a
}

type checker struct {
	pass  *analysis.Pass
	cfg   *Config
	res   *facts.Result
	rep   *directive.Reporter
	calls map[token.Pos]*ssa.CallCommon // by Lparen
	body  *ast.BlockStmt                // of the function declaration being checked
}

type kind int

const (
	kSQL kind = iota
	kGorm
	kRedis
)

// event is a check or a write of a record.
type event struct {
	kind   kind
	target string // table, model type or key expression
	call   *ast.CallExpr
	stack  rulekit.Stack
	vars   map[types.Object]bool // what the check's statement defines
	what   string                // display
	atomic bool                  // a write that claims atomically
	text   string                // the SQL, if any
}

var (
	reSelect   = regexp.MustCompile(`(?is)^\s*select\b.*?\bfrom\s+((?:"?\w+"?\.)?"?\w+"?)(.*)$`)
	reInsert   = regexp.MustCompile(`(?is)^\s*insert\s+(?:or\s+\w+\s+|ignore\s+)?into\s+((?:"?\w+"?\.)?"?\w+"?)`)
	reAtomic   = regexp.MustCompile(`(?i)\bon\s+conflict\b|\bon\s+duplicate\s+key\b|^\s*insert\s+(or\s+\w+\s+|ignore\s+)|\bwhere\s+not\s+exists\b|\bmerge\b`)
	reForUpd   = regexp.MustCompile(`(?i)\bfor\s+(no\s+key\s+)?update\b|\bfor\s+share\b`)
	reRecord   = regexp.MustCompile(`(?i)(processed|consumed|handled|seen|received)_?(message|event|request|webhook|notification|callback)s?`)
	reRedisGet = map[string]bool{"Get": true, "Exists": true, "HGet": true, "HExists": true}
	reRedisSet = map[string]bool{"Set": true, "SetEx": true, "HSet": true, "HMSet": true, "Incr": true}
)

func baseTable(t string) string {
	t = strings.ReplaceAll(t, `"`, "")
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		t = t[i+1:]
	}
	return strings.ToLower(t)
}

// tokenTable: the table (or the check's WHERE) names an idempotency key or
// record.
func (c *checker) tokenTable(table, where string) bool {
	for _, t := range c.cfg.Tables {
		if strings.EqualFold(t, table) {
			return true
		}
	}
	return rulekit.TokenWords(table) || reRecord.MatchString(table) || rulekit.TokenWords(where)
}

func (c *checker) run() {
	c.calls = map[token.Pos]*ssa.CallCommon{}
	for _, fn := range c.res.SSA.SrcFuncs {
		for _, b := range fn.Blocks {
			for _, in := range b.Instrs {
				if k, ok := in.(ssa.CallInstruction); ok {
					c.calls[k.Common().Pos()] = k.Common()
				}
			}
		}
	}
	for _, f := range c.pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				c.body = fd.Body
				c.function(fd.Body)
			}
		}
	}
}

// function checks one function body; function literals are checked on
// their own.
func (c *checker) function(body *ast.BlockStmt) {
	var checks, writes []*event
	var stack rulekit.Stack
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		if fl, ok := n.(*ast.FuncLit); ok {
			c.function(fl.Body)
			return false
		}
		stack = append(stack, n)
		if call, ok := n.(*ast.CallExpr); ok {
			st := append(rulekit.Stack(nil), stack...)
			if e := c.check(call, st); e != nil {
				checks = append(checks, e)
			}
			if e := c.write(call, st); e != nil {
				writes = append(writes, e)
			}
		}
		return true
	})
	for _, w := range writes {
		if w.atomic {
			continue
		}
		for _, ch := range checks {
			if ch.kind != w.kind || ch.target != w.target || ch.call.Pos() >= w.call.Pos() {
				continue
			}
			branch := c.notFoundPath(ch, w)
			if branch == nil || c.effectBetween(body, ch.call, w.call) {
				continue
			}
			c.report(ch, w, branch)
			break
		}
	}
}

// check returns the read of a record that call makes, if any.
func (c *checker) check(call *ast.CallExpr, stack rulekit.Stack) *event {
	info := c.pass.TypesInfo
	if q, _, method, ok := rulekit.SQLCall(info, c.pass.Files, call); ok && !strings.HasPrefix(method, "Exec") {
		m := reSelect.FindStringSubmatch(q)
		if m == nil || reForUpd.MatchString(q) || !c.tokenTable(baseTable(m[1]), m[2]) {
			return nil
		}
		return &event{kind: kSQL, target: baseTable(m[1]), call: call, stack: stack, vars: c.defined(stack), what: rulekit.ShortName(rulekit.Callee(info, call)), text: q}
	}
	fn := rulekit.Callee(info, call)
	if fn == nil {
		return nil
	}
	switch {
	case rulekit.Is(fn, "gorm.io/gorm", "First", "Take", "Last", "Find", "Count"):
		model := c.gormModel(call)
		if model == "" {
			return nil
		}
		return &event{kind: kGorm, target: model, call: call, stack: stack, vars: c.defined(stack), what: "gorm " + fn.Name()}
	case rulekit.IsRedis(fn) && reRedisGet[fn.Name()] && len(call.Args) >= 2:
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			if p, n := rulekit.NamedOf(info.TypeOf(sel.X)); rulekit.IsRedisPkg(p) && n == "Tx" {
				return nil // a read inside WATCH: the EXEC fails if the key changed
			}
		}
		key := call.Args[1]
		if !rulekit.TokenWords(rulekit.KeyWords(info, c.body, key)...) {
			return nil
		}
		return &event{kind: kRedis, target: types.ExprString(key), call: call, stack: stack, vars: c.defined(stack), what: rulekit.ShortName(fn)}
	}
	return nil
}

// write returns the write of a record that call makes, if any.
func (c *checker) write(call *ast.CallExpr, stack rulekit.Stack) *event {
	info := c.pass.TypesInfo
	if q, _, _, ok := rulekit.SQLCall(info, c.pass.Files, call); ok {
		m := reInsert.FindStringSubmatch(q)
		if m == nil {
			return nil
		}
		return &event{kind: kSQL, target: baseTable(m[1]), call: call, stack: stack, what: rulekit.ShortName(rulekit.Callee(info, call)), atomic: reAtomic.MatchString(q), text: q}
	}
	fn := rulekit.Callee(info, call)
	if fn == nil {
		return nil
	}
	switch {
	case rulekit.Is(fn, "gorm.io/gorm", "Create") && len(call.Args) == 1:
		model := typeKey(info.TypeOf(call.Args[0]))
		if model == "" {
			return nil
		}
		return &event{kind: kGorm, target: model, call: call, stack: stack, what: "gorm Create", atomic: c.gormOnConflict(call)}
	case rulekit.Is(fn, "gorm.io/gorm", "FirstOrCreate"):
		if model := c.gormModel(call); model != "" {
			c.firstOrCreate(call, model)
		}
	case rulekit.IsRedis(fn) && reRedisSet[fn.Name()] && len(call.Args) >= 2:
		return &event{kind: kRedis, target: types.ExprString(call.Args[1]), call: call, stack: stack, what: rulekit.ShortName(fn)}
	}
	return nil
}

// typeKey names a gorm model by its struct type: the type of *T, []T, T.
func typeKey(t types.Type) string {
	for {
		switch u := t.(type) {
		case *types.Pointer:
			t = u.Elem()
			continue
		case *types.Slice:
			t = u.Elem()
			continue
		}
		break
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return ""
	}
	if _, ok := n.Underlying().(*types.Struct); !ok {
		return ""
	}
	return n.Obj().Pkg().Path() + "." + n.Obj().Name()
}

// gormModel returns the record type a gorm query reads (its dest or its
// Model), when that type names an idempotency key or record.
func (c *checker) gormModel(call *ast.CallExpr) string {
	info := c.pass.TypesInfo
	var t types.Type
	if len(call.Args) > 0 {
		if fn := rulekit.Callee(info, call); fn.Name() != "Count" {
			t = info.TypeOf(call.Args[0])
		}
	}
	words := []string{}
	for x := call.Fun; ; {
		sel, ok := ast.Unparen(x).(*ast.SelectorExpr)
		if !ok {
			break
		}
		k, ok := ast.Unparen(sel.X).(*ast.CallExpr)
		if !ok {
			break
		}
		kf := rulekit.Callee(info, k)
		if kf != nil && rulekit.PkgPath(kf) == "gorm.io/gorm" && len(k.Args) > 0 {
			switch kf.Name() {
			case "Model":
				if t == nil {
					t = info.TypeOf(k.Args[0])
				}
			case "Where", "Table":
				words = append(words, rulekit.Words(info, k.Args[0])...)
			}
		}
		x = k.Fun
	}
	key := typeKey(t)
	if key == "" {
		return ""
	}
	name := key[strings.LastIndexByte(key, '.')+1:]
	if !rulekit.TokenWords(append(words, name)...) && !reRecord.MatchString(rulekit.Snake(name)) && !c.tokenTable(rulekit.Snake(name), "") {
		return ""
	}
	return key
}

// gormOnConflict reports whether a Create's chain has a Clauses call (an
// OnConflict, or anything we cannot read).
func (c *checker) gormOnConflict(call *ast.CallExpr) bool {
	info := c.pass.TypesInfo
	for x := call.Fun; ; {
		sel, ok := ast.Unparen(x).(*ast.SelectorExpr)
		if !ok {
			return false
		}
		k, ok := ast.Unparen(sel.X).(*ast.CallExpr)
		if !ok {
			return false
		}
		if kf := rulekit.Callee(info, k); kf != nil && kf.Name() == "Clauses" {
			return true
		}
		x = k.Fun
	}
}

// defined returns the variables the statement holding a check defines or
// assigns (err, the scanned destinations, a count), and the check's own
// call: conditions on them decide the not-found path.
func (c *checker) defined(stack rulekit.Stack) map[types.Object]bool {
	info := c.pass.TypesInfo
	vars := map[types.Object]bool{}
	var stmt ast.Node
	for i := len(stack) - 1; i >= 0; i-- {
		if s, ok := stack[i].(ast.Stmt); ok {
			stmt = s
			break
		}
	}
	if stmt == nil {
		return vars
	}
	switch s := stmt.(type) {
	case *ast.IfStmt: // if check(..) == 0 { .. }: only the init defines anything
		stmt = s.Init
	case *ast.SwitchStmt:
		stmt = s.Init
	}
	if stmt == nil || reflect.ValueOf(stmt).IsNil() {
		return vars
	}
	ast.Inspect(stmt, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.Ident:
			if o, ok := info.Defs[x].(*types.Var); ok {
				vars[o] = true
			}
		case *ast.AssignStmt:
			for _, l := range x.Lhs {
				if id, ok := l.(*ast.Ident); ok {
					if o, ok := info.Uses[id].(*types.Var); ok {
						vars[o] = true
					}
				}
			}
		case *ast.UnaryExpr:
			if x.Op == token.AND {
				if id, ok := x.X.(*ast.Ident); ok {
					if o, ok := info.Uses[id].(*types.Var); ok {
						vars[o] = true
					}
				}
			}
		}
		return true
	})
	// An if statement whose init holds the check: its condition decides.
	return vars
}

// mentions reports whether e refers to one of vars or contains call.
func (c *checker) mentions(e ast.Node, ch *event) bool {
	if e == nil {
		return false
	}
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.Ident:
			if o := c.pass.TypesInfo.Uses[x]; o != nil && ch.vars[o] {
				found = true
			}
		case *ast.CallExpr:
			if x == ch.call {
				found = true
			}
		}
		return !found
	})
	return found
}

// notFoundPath returns the branch that puts w on the check's not-found
// path: an if or case around w whose condition says "not found", or an
// earlier if whose condition says "found" and whose body leaves.
func (c *checker) notFoundPath(ch *event, w *event) ast.Node {
	st := w.stack
	for i := len(st) - 1; i > 0; i-- {
		switch p := st[i-1].(type) {
		case *ast.IfStmt:
			if st[i] == p.Cond || st[i] == p.Init {
				continue
			}
			pol := c.pol(p.Cond, ch)
			if st[i] == p.Body && pol > 0 || st[i] == p.Else && pol < 0 {
				return p
			}
		case *ast.CaseClause:
			var tag ast.Expr
			if i >= 3 {
				if sw, ok := st[i-3].(*ast.SwitchStmt); ok {
					tag = sw.Tag
				}
			}
			for _, e := range p.List {
				if tag != nil {
					e = &ast.BinaryExpr{X: tag, Op: token.EQL, Y: e, OpPos: e.Pos()}
				}
				if c.pol(e, ch) > 0 {
					return p
				}
			}
		case *ast.BlockStmt:
			// Earlier statements of this block, after the check.
			for _, s := range p.List {
				if s.Pos() >= st[i].Pos() {
					break
				}
				ifs, ok := s.(*ast.IfStmt)
				if !ok || ifs.End() < ch.call.Pos() {
					continue
				}
				if c.pol(ifs.Cond, ch) < 0 && leaves(ifs.Body) {
					return ifs
				}
			}
		}
	}
	return nil
}

// notFoundErr reports whether e names a not-found sentinel: sql.ErrNoRows,
// pgx.ErrNoRows, redis.Nil, gorm.ErrRecordNotFound.
func (c *checker) notFoundErr(e ast.Expr) bool {
	var id *ast.Ident
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	default:
		return false
	}
	switch id.Name {
	case "ErrNoRows", "Nil", "ErrRecordNotFound", "ErrNotFound":
		_, isVarOrConst := c.pass.TypesInfo.Uses[id].(*types.Var)
		_, isConst := c.pass.TypesInfo.Uses[id].(*types.Const)
		return isVarOrConst || isConst
	}
	return false
}

func isNil(e ast.Expr) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	return ok && id.Name == "nil"
}

func isZero(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil {
		return false
	}
	switch tv.Value.Kind() {
	case constant.Int, constant.Float:
		return constant.Sign(tv.Value) == 0
	case constant.String:
		return constant.StringVal(tv.Value) == ""
	case constant.Bool:
		return !constant.BoolVal(tv.Value)
	}
	return false
}

func isOne(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	return ok && tv.Value != nil && tv.Value.Kind() == constant.Int && constant.Compare(tv.Value, token.EQL, constant.MakeInt64(1))
}

// pol is the polarity of a condition on the check's results: 1 when true
// means "not found", -1 when true means "found", 0 when it says neither
// (or does not read the check).
func (c *checker) pol(e ast.Expr, ch *event) int {
	if e == nil || !c.mentions(e, ch) {
		return 0
	}
	info := c.pass.TypesInfo
	switch x := ast.Unparen(e).(type) {
	case *ast.UnaryExpr:
		if x.Op == token.NOT {
			return -c.pol(x.X, ch)
		}
	case *ast.BinaryExpr:
		switch x.Op {
		case token.LAND, token.LOR:
			a, b := c.pol(x.X, ch), c.pol(x.Y, ch)
			switch {
			case a == b:
				return a
			case a == 0 && !c.mentions(x.X, ch):
				return b
			case b == 0 && !c.mentions(x.Y, ch):
				return a
			}
			return 0
		}
		l, r := x.X, x.Y
		if !c.mentions(l, ch) {
			l, r = r, l
		}
		sign := 0
		switch {
		case c.notFoundErr(r):
			sign = 1
		case isNil(r):
			if t := info.TypeOf(l); t != nil && types.Identical(t, types.Universe.Lookup("error").Type()) {
				sign = 1 // err != nil: not found (or failed); err == nil: found
				if x.Op == token.EQL {
					return -1
				}
				return 1
			}
			sign = 1 // a nil record: not found
		case isZero(info, r):
			sign = 1
		case isOne(info, r) && (x.Op == token.LSS || x.Op == token.GEQ):
			if x.Op == token.LSS {
				return 1
			}
			return -1
		default:
			return 0
		}
		switch x.Op {
		case token.EQL, token.LEQ:
			return sign
		case token.NEQ, token.GTR:
			return -sign
		}
	case *ast.CallExpr:
		if fn := rulekit.Callee(info, x); fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "errors" && fn.Name() == "Is" && len(x.Args) == 2 && c.notFoundErr(x.Args[1]) {
			return 1
		}
		if t, ok := info.TypeOf(x).(*types.Basic); ok && t.Kind() == types.Bool {
			return -1 // exists(...), HExists(..).Val()
		}
	case *ast.Ident, *ast.SelectorExpr:
		if t, ok := info.TypeOf(x).Underlying().(*types.Basic); ok && t.Kind() == types.Bool {
			return -1 // if exists / if found
		}
	}
	return 0
}

// leaves reports whether a block ends by leaving (return, panic, continue, break, goto).
func leaves(b *ast.BlockStmt) bool {
	if len(b.List) == 0 {
		return false
	}
	switch s := b.List[len(b.List)-1].(type) {
	case *ast.ReturnStmt, *ast.BranchStmt:
		return true
	case *ast.ExprStmt:
		if call, ok := s.X.(*ast.CallExpr); ok {
			if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "panic" {
				return true
			}
		}
	}
	return false
}

// effectBetween reports whether a call that may do network I/O (not a
// go-redis command) sits between from and to: tokenorder's ordering.
func (c *checker) effectBetween(body *ast.BlockStmt, from, to *ast.CallExpr) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		k, ok := n.(*ast.CallExpr)
		if !ok || found || k == from || k == to || k.Pos() <= from.End() || k.Pos() >= to.Pos() {
			return !found
		}
		if cc := c.calls[k.Lparen]; cc != nil {
			if p := c.res.NetCall(cc); p != nil {
				leaf := p.Chain[len(p.Chain)-1]
				if !strings.HasPrefix(leaf, "(redis.") && !strings.HasPrefix(leaf, "(*redis.") {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// report reports w, a plain write on the not-found path of ch.
func (c *checker) report(ch, w *event, branch ast.Node) {
	var msg string
	switch w.kind {
	case kSQL:
		msg = "%s inserts into %s (%q) on the not-found path of a plain read of the same table (%s at %s), with no ON CONFLICT: " +
			"two duplicates arriving together both find nothing and both insert, so both act (a double charge) or the second fails on a duplicate key that its client takes for a failure and retries; " +
			"claim the key in one statement instead, INSERT INTO %s .. ON CONFLICT (key) DO NOTHING, and act only when one row was inserted"
		msg = fmtf(msg, w.what, w.target, rulekit.Short(w.text, 100), ch.what, c.pos(ch.call.Pos()), w.target)
	case kGorm:
		name := w.target[strings.LastIndexByte(w.target, '.')+1:]
		msg = fmtf("gorm Create of %s runs on the not-found path of a plain read of the same record (%s at %s), with no clause.OnConflict: "+
			"two duplicates arriving together both find nothing and both create, so both act or the second fails on a duplicate key; "+
			"claim in one statement instead, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&rec), and act only when RowsAffected == 1",
			name, ch.what, c.pos(ch.call.Pos()))
	case kRedis:
		msg = fmtf("%s writes the idempotency key %s without NX on the not-found path of a plain read of it (%s at %s): "+
			"two duplicates arriving together both see no key and both go on to act (a double charge); "+
			"claim the key in one command instead, SetNX(ctx, %s, PROCESSING, ttl) (or SetArgs with Mode: \"NX\"), and act only when it returns true",
			w.what, w.target, ch.what, c.pos(ch.call.Pos()), w.target)
	}
	c.rep.Report(analysis.Diagnostic{Pos: w.call.Pos(), End: w.call.End(), Message: msg, Related: []analysis.RelatedInformation{
		{Pos: ch.call.Pos(), End: ch.call.End(), Message: "the non-atomic check: " + ch.what},
		{Pos: branch.Pos(), Message: "the not-found path is decided here"},
	}})
}

// firstOrCreate reports gorm FirstOrCreate of an idempotency record: a
// SELECT then an INSERT in two statements.
func (c *checker) firstOrCreate(call *ast.CallExpr, model string) {
	name := model[strings.LastIndexByte(model, '.')+1:]
	sel := call.Fun.(*ast.SelectorExpr)
	msg := fmtf("gorm FirstOrCreate of %s at %s is a SELECT then an INSERT, not one atomic step: "+
		"two duplicates arriving together both find nothing and both create, so both act or the second fails on a duplicate key; "+
		"claim in one statement instead, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&rec), and act only when RowsAffected == 1",
		name, c.pos(sel.Sel.Pos()))
	c.rep.Report(analysis.Diagnostic{Pos: sel.Sel.Pos(), End: call.End(), Message: msg, Related: []analysis.RelatedInformation{
		{Pos: call.Args[0].Pos(), Message: "the record: " + name},
	}})
}

func (c *checker) pos(p token.Pos) string {
	return c.res.PosString(p)
}

var fmtf = fmt.Sprintf
