package rulekit

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"
)

// maxTextDepth bounds how many variables, fields and concatenations
// StringText follows from one expression.
const maxTextDepth = 8

// StringText returns the string e evaluates to when the code determines
// it, and the position of the text (its constant's declaration, or the
// expression the variable was defined with). Besides constants it follows:
//
//   - a local variable defined once (q := ..., var q = ...) and then only
//     appended to (q += ...) by statements of the same block before the
//     use, whose address is never taken: a variable assigned on another
//     path, in a closure or after the use is not determined;
//   - a package variable of this package that no function writes;
//   - a field of a query struct, a local one defined by a composite
//     literal whose fields are never written afterwards, or a package one
//     that no function writes;
//   - a concatenation of these, and fmt.Sprintf with a determined format
//     and determined string or integer arguments.
//
// Anything else (a parameter, a call's result, a loop-carried value) is not
// determined, and the caller says nothing about it.
func StringText(info *types.Info, files []*ast.File, e ast.Expr) (string, token.Pos, bool) {
	t := &texter{info: info, files: files}
	return t.eval(e, 0)
}

type texter struct {
	info  *types.Info
	files []*ast.File
}

func (t *texter) eval(e ast.Expr, depth int) (string, token.Pos, bool) {
	if s, pos, ok := ConstString(t.info, e); ok {
		return s, pos, true
	}
	if depth > maxTextDepth {
		return "", token.NoPos, false
	}
	switch x := ast.Unparen(e).(type) {
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", token.NoPos, false
		}
		l, pos, ok1 := t.eval(x.X, depth+1)
		r, _, ok2 := t.eval(x.Y, depth+1)
		return l + r, pos, ok1 && ok2
	case *ast.CallExpr:
		if fn := Callee(t.info, x); Is(fn, PkgSquirrel, "ToSql") {
			if sel, ok := ast.Unparen(x.Fun).(*ast.SelectorExpr); ok {
				return t.builder(sel.X, depth+1)
			}
			return "", token.NoPos, false
		}
		return t.sprintf(x, depth)
	case *ast.Ident:
		v, ok := t.info.Uses[x].(*types.Var)
		if !ok || !isString(v.Type()) {
			return "", token.NoPos, false
		}
		if v.Parent() == v.Pkg().Scope() {
			init := t.packageInit(v, "")
			if init == nil {
				return "", token.NoPos, false
			}
			return t.eval(init, depth+1)
		}
		return t.local(x, v, depth)
	case *ast.SelectorExpr:
		return t.field(x, depth)
	}
	return "", token.NoPos, false
}

func isString(ty types.Type) bool {
	b, ok := ty.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsString != 0
}

// sprintf evaluates fmt.Sprintf with a determined format and arguments.
func (t *texter) sprintf(call *ast.CallExpr, depth int) (string, token.Pos, bool) {
	fn := Callee(t.info, call)
	if !Is(fn, "fmt", "Sprintf") || len(call.Args) == 0 || call.Ellipsis.IsValid() {
		return "", token.NoPos, false
	}
	format, pos, ok := t.eval(call.Args[0], depth+1)
	if !ok {
		return "", token.NoPos, false
	}
	var args []any
	for _, a := range call.Args[1:] {
		if tv, ok := t.info.Types[a]; ok && tv.Value != nil && tv.Value.Kind() == constant.Int {
			n, exact := constant.Int64Val(tv.Value)
			if !exact {
				return "", token.NoPos, false
			}
			args = append(args, n)
			continue
		}
		s, _, ok := t.eval(a, depth+1)
		if !ok {
			return "", token.NoPos, false
		}
		args = append(args, s)
	}
	out := fmt.Sprintf(format, args...)
	if strings.Contains(out, "%!") {
		return "", token.NoPos, false // a verb the arguments do not fit
	}
	return out, pos, true
}

// field evaluates x.f, a field of a query struct held in a local or package
// variable that nothing writes after its composite literal.
func (t *texter) field(sel *ast.SelectorExpr, depth int) (string, token.Pos, bool) {
	s, ok := t.info.Selections[sel]
	if !ok || s.Kind() != types.FieldVal || len(s.Index()) != 1 || !isString(s.Type()) {
		return "", token.NoPos, false
	}
	id, ok := ast.Unparen(sel.X).(*ast.Ident)
	if !ok {
		return "", token.NoPos, false
	}
	v, ok := t.info.Uses[id].(*types.Var)
	if !ok {
		return "", token.NoPos, false
	}
	name := sel.Sel.Name
	if v.Parent() == v.Pkg().Scope() {
		if init := t.packageInit(v, name); init != nil {
			return t.eval(init, depth+1)
		}
		return "", token.NoPos, false
	}
	root := t.enclosingDecl(v.Pos())
	if root == nil || FuncLitOf(root, v.Pos()) != FuncLitOf(root, id.Pos()) {
		return "", token.NoPos, false
	}
	var lit *ast.CompositeLit
	defs := 0
	bad := false
	ast.Inspect(root, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for i, l := range x.Lhs {
				if rootIdent(l) == nil || t.info.ObjectOf(rootIdent(l)) != v {
					continue
				}
				lid, isID := l.(*ast.Ident)
				if !isID || x.Tok != token.DEFINE || len(x.Lhs) != len(x.Rhs) || t.info.Defs[lid] != v {
					bad = true // v or one of its fields written
					continue
				}
				defs++
				lit = compositeLit(x.Rhs[i])
			}
		case *ast.ValueSpec:
			for i, n := range x.Names {
				if t.info.Defs[n] == v {
					defs++
					if len(x.Values) == len(x.Names) {
						lit = compositeLit(x.Values[i])
					}
				}
			}
		default:
			bad = bad || writesOtherwise(t.info, n, v)
		}
		return !bad
	})
	if bad || defs != 1 || lit == nil {
		return "", token.NoPos, false
	}
	if _, isPtr := v.Type().Underlying().(*types.Pointer); isPtr && !onlyFieldReads(t.info, root, v) {
		return "", token.NoPos, false // the pointer goes elsewhere, which may write through it
	}
	if e := litField(lit, name, t.info); e != nil {
		return t.eval(e, depth+1)
	}
	return "", token.NoPos, false
}

// onlyFieldReads reports whether every use of v in root selects a field.
func onlyFieldReads(info *types.Info, root ast.Node, v types.Object) bool {
	ids, parents := Uses(info, root, v)
	for i := range ids {
		if s, ok := parents[i].(*ast.SelectorExpr); !ok || s.X != ast.Expr(ids[i]) {
			return false
		}
	}
	return true
}

// compositeLit returns the composite literal e is, or takes the address of.
func compositeLit(e ast.Expr) *ast.CompositeLit {
	e = ast.Unparen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = ast.Unparen(u.X)
	}
	lit, _ := e.(*ast.CompositeLit)
	return lit
}

// litField returns the value given to field name in lit, or nil.
func litField(lit *ast.CompositeLit, name string, info *types.Info) ast.Expr {
	st, ok := info.TypeOf(lit).Underlying().(*types.Struct)
	if !ok {
		return nil
	}
	for i, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == name {
				return kv.Value
			}
			continue
		}
		if i < st.NumFields() && st.Field(i).Name() == name {
			return el
		}
	}
	return nil
}

// writesOtherwise reports whether n writes v, or lets it be written, other
// than by an assignment: v++, &v (or &v.f), a range loop assigning v.
func writesOtherwise(info *types.Info, n ast.Node, v types.Object) bool {
	is := func(e ast.Expr) bool {
		r := rootIdent(e)
		return r != nil && info.ObjectOf(r) == v
	}
	switch x := n.(type) {
	case *ast.UnaryExpr:
		return x.Op == token.AND && is(x.X)
	case *ast.IncDecStmt:
		return is(x.X)
	case *ast.RangeStmt:
		return x.Key != nil && is(x.Key) || x.Value != nil && is(x.Value)
	}
	return false
}

// rootIdent returns the variable an lvalue writes into: q for q, q.f,
// q.f.g, q[i] and *q.
func rootIdent(e ast.Expr) *ast.Ident {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.Ident:
			return x
		case *ast.SelectorExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// packageInit returns the initializer of package variable v (of field
// name of its composite literal, when name is set), when no function of
// the package writes v or takes its address; else nil.
func (t *texter) packageInit(v *types.Var, name string) ast.Expr {
	var init ast.Expr
	written := false
	for _, f := range t.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.ValueSpec:
				for i, id := range x.Names {
					if t.info.Defs[id] == v && len(x.Values) == len(x.Names) {
						init = x.Values[i]
					}
				}
			case *ast.AssignStmt:
				for _, l := range x.Lhs {
					if r := rootIdent(l); r != nil && t.info.Uses[r] == v {
						written = true
					}
				}
			default:
				written = written || writesOtherwise(t.info, n, v)
			}
			return !written
		})
	}
	if written || init == nil {
		return nil
	}
	if name == "" {
		return init
	}
	if _, isPtr := v.Type().Underlying().(*types.Pointer); isPtr {
		return nil // a pointer may be handed out and written through
	}
	if lit := compositeLit(init); lit != nil {
		return litField(lit, name, t.info)
	}
	return nil
}

// local evaluates the local variable v at its use id: defined once, then
// appended to only by statements of the defining block before id.
func (t *texter) local(id *ast.Ident, v *types.Var, depth int) (string, token.Pos, bool) {
	root := t.enclosingDecl(v.Pos())
	if root == nil {
		return "", token.NoPos, false
	}
	var def ast.Expr       // the defining value
	var defStmt ast.Stmt   // its statement
	var appends []ast.Stmt // q += ...
	var addends []ast.Expr // their values
	bad := false
	ast.Inspect(root, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for i, l := range x.Lhs {
				r := rootIdent(l)
				if r == nil || t.info.ObjectOf(r) != v {
					continue
				}
				switch {
				case i == 0 && len(x.Rhs) == 1 && x.Tok == token.DEFINE && t.info.Defs[r] == v && isToSQL(t.info, x.Rhs[0]):
					def, defStmt = x.Rhs[0], x // query, args, err := b.ToSql()
				case len(x.Lhs) != len(x.Rhs) || r != l:
					bad = true
				case x.Tok == token.DEFINE && t.info.Defs[r] == v:
					def, defStmt = x.Rhs[i], x
				case x.Tok == token.ADD_ASSIGN:
					appends, addends = append(appends, x), append(addends, x.Rhs[i])
				default:
					bad = true // assigned again: which text reaches the use depends on the path
				}
			}
		case *ast.DeclStmt:
			if g, ok := x.Decl.(*ast.GenDecl); ok {
				for _, s := range g.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for i, n := range vs.Names {
							if t.info.Defs[n] == v && len(vs.Values) == len(vs.Names) {
								def, defStmt = vs.Values[i], x
							}
						}
					}
				}
			}
		default:
			bad = bad || writesOtherwise(t.info, n, v)
		}
		return !bad
	})
	if bad || def == nil {
		return "", token.NoPos, false
	}
	if len(appends) > 0 {
		// The appends are statements of the defining block, before the
		// use, and the use is not in a closure that may run later.
		block := blockOf(root, defStmt)
		if block == nil || FuncLitOf(root, id.Pos()) != FuncLitOf(root, defStmt.Pos()) {
			return "", token.NoPos, false
		}
		for _, a := range appends {
			if blockOf(root, a) != block || a.Pos() < defStmt.Pos() || a.End() > id.Pos() {
				return "", token.NoPos, false
			}
		}
	}
	s, pos, ok := t.eval(def, depth+1)
	if !ok {
		return "", token.NoPos, false
	}
	if p := def.Pos(); !isConstExpr(t.info, def) {
		pos = p
	}
	for _, a := range addends {
		r, _, ok := t.eval(a, depth+1)
		if !ok {
			return "", token.NoPos, false
		}
		s += r
	}
	return s, pos, true
}

func isConstExpr(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	return ok && tv.Value != nil
}

// enclosingDecl returns the top-level function declaration holding pos.
func (t *texter) enclosingDecl(pos token.Pos) *ast.FuncDecl {
	f := FileOf(t.files, pos)
	if f == nil {
		return nil
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil && fd.Pos() <= pos && pos < fd.End() {
			return fd
		}
	}
	return nil
}

// blockOf returns the block (or case clause) directly holding stmt in
// root, or nil.
func blockOf(root ast.Node, stmt ast.Stmt) ast.Node {
	var out ast.Node
	ast.Inspect(root, func(n ast.Node) bool {
		if out != nil {
			return false
		}
		var list []ast.Stmt
		switch x := n.(type) {
		case *ast.BlockStmt:
			list = x.List
		case *ast.CaseClause:
			list = x.Body
		case *ast.CommClause:
			list = x.Body
		}
		for _, s := range list {
			if s == stmt {
				out = n
			}
		}
		return true
	})
	return out
}

// FuncLitOf returns the innermost function literal of root holding pos, or
// nil when pos is in root's own body.
func FuncLitOf(root ast.Node, pos token.Pos) *ast.FuncLit {
	var out *ast.FuncLit
	ast.Inspect(root, func(n ast.Node) bool {
		if n == nil || !(n.Pos() <= pos && pos < n.End()) {
			return false
		}
		if fl, ok := n.(*ast.FuncLit); ok {
			out = fl
		}
		return true
	})
	return out
}

// PkgSquirrel is the import path of the squirrel query builder.
const PkgSquirrel = "github.com/Masterminds/squirrel"

// isToSQL reports whether e is a call of a squirrel builder's ToSql.
func isToSQL(info *types.Info, e ast.Expr) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	return ok && Is(Callee(info, call), PkgSquirrel, "ToSql")
}

// builder returns the text of a squirrel update, select or insert builder
// written as one chain of calls (sq.Update("payouts").Set("status",
// "FAILED").Where(sq.Eq{"reference": ref})), rendered with ? placeholders:
// the table, each Set's column and constant value (? for any other), each
// Where's constant text or sq.Eq literal with constant keys (in squirrel's
// sorted order). SetMap of a map literal with constant keys sets its
// columns in sorted order, as squirrel does. A select is its constant
// columns, From and Where and constant Suffix texts; an insert its table,
// constant Columns, one Values call of as many values, and constant Suffix
// texts (ON CONFLICT ..). A builder held in a variable, or a method that
// changes the statement in a way not read here (an update's Suffix, a
// select's Join or Limit, ...), is not determined.
func (t *texter) builder(e ast.Expr, depth int) (string, token.Pos, bool) {
	var sets, wheres, cols, vals, suffixes []string
	var from string
	var valuesCalls int
	for {
		call, ok := ast.Unparen(e).(*ast.CallExpr)
		if !ok {
			return "", token.NoPos, false
		}
		fn := Callee(t.info, call)
		if PkgPath(fn) != PkgSquirrel {
			return "", token.NoPos, false
		}
		switch fn.Name() {
		case "Update":
			if len(call.Args) != 1 {
				return "", token.NoPos, false
			}
			table, pos, ok := t.eval(call.Args[0], depth+1)
			if !ok {
				return "", token.NoPos, false
			}
			if len(cols) > 0 || valuesCalls > 0 || from != "" || len(suffixes) > 0 {
				return "", token.NoPos, false
			}
			q := "UPDATE " + table + " SET " + strings.Join(sets, ", ")
			if len(wheres) > 0 {
				q += " WHERE " + strings.Join(wheres, " AND ")
			}
			return q, pos, true
		case "Insert": // INSERT INTO t (cols) VALUES (vals) suffix
			if len(call.Args) != 1 || len(sets) > 0 || len(wheres) > 0 || from != "" || valuesCalls != 1 || len(cols) == 0 || len(cols) != len(vals) {
				return "", token.NoPos, false
			}
			table, pos, ok := t.eval(call.Args[0], depth+1)
			if !ok {
				return "", token.NoPos, false
			}
			q := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
			for _, sfx := range suffixes {
				q += " " + sfx
			}
			return q, pos, true
		case "Select": // SELECT cols FROM t WHERE .. suffix
			if len(sets) > 0 || valuesCalls > 0 || len(cols) > 0 || from == "" || len(call.Args) == 0 || call.Ellipsis.IsValid() {
				return "", token.NoPos, false
			}
			var sel []string
			for _, a := range call.Args {
				c, _, ok := t.eval(a, depth+1)
				if !ok {
					return "", token.NoPos, false
				}
				sel = append(sel, c)
			}
			q := "SELECT " + strings.Join(sel, ", ") + " FROM " + from
			if len(wheres) > 0 {
				q += " WHERE " + strings.Join(wheres, " AND ")
			}
			for _, sfx := range suffixes {
				q += " " + sfx
			}
			return q, call.Pos(), true
		case "From":
			if len(call.Args) != 1 || from != "" {
				return "", token.NoPos, false
			}
			f, _, ok := t.eval(call.Args[0], depth+1)
			if !ok {
				return "", token.NoPos, false
			}
			from = f
		case "Columns":
			if call.Ellipsis.IsValid() {
				return "", token.NoPos, false
			}
			var cs []string
			for _, a := range call.Args {
				c, _, ok := t.eval(a, depth+1)
				if !ok {
					return "", token.NoPos, false
				}
				cs = append(cs, c)
			}
			cols = append(cs, cols...)
		case "Values":
			if call.Ellipsis.IsValid() {
				return "", token.NoPos, false
			}
			valuesCalls++
			for _, a := range call.Args {
				vals = append(vals, t.sqlValue(a))
			}
		case "Suffix": // constant text; its arguments are placeholders in it
			sfx, _, ok := t.eval(call.Args[0], depth+1)
			if !ok {
				return "", token.NoPos, false
			}
			suffixes = append([]string{sfx}, suffixes...)
		case "Set":
			col, _, ok := t.eval(call.Args[0], depth+1)
			if !ok {
				return "", token.NoPos, false
			}
			sets = append([]string{col + " = " + t.sqlValue(call.Args[1])}, sets...)
		case "SetMap": // squirrel sets the map's columns in sorted order
			m, ok := t.setMap(call.Args[0], depth)
			if !ok {
				return "", token.NoPos, false
			}
			sets = append(m, sets...)
		case "Where":
			w, ok := t.where(call.Args[0], depth)
			if !ok {
				return "", token.NoPos, false
			}
			wheres = append([]string{w}, wheres...)
		case "PlaceholderFormat", "RunWith":
		default:
			return "", token.NoPos, false
		}
		sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !ok {
			return "", token.NoPos, false
		}
		e = sel.X
	}
}

// sqlValue renders a value given to a builder: a constant as a SQL
// literal, anything else as a placeholder.
func (t *texter) sqlValue(e ast.Expr) string {
	tv, ok := t.info.Types[e]
	if !ok || tv.Value == nil {
		return "?"
	}
	if tv.Value.Kind() == constant.String {
		return "'" + strings.ReplaceAll(constant.StringVal(tv.Value), "'", "''") + "'"
	}
	return tv.Value.ExactString()
}

// where renders a Where predicate: determined text, or an sq.Eq literal
// whose keys are constant.
func (t *texter) where(e ast.Expr, depth int) (string, bool) {
	if s, _, ok := t.eval(e, depth+1); ok {
		return s, true
	}
	lit, ok := ast.Unparen(e).(*ast.CompositeLit)
	if !ok {
		return "", false
	}
	if p, n := NamedOf(t.info.TypeOf(lit)); p != PkgSquirrel || n != "Eq" || len(lit.Elts) == 0 {
		return "", false
	}
	var parts []string
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return "", false
		}
		k, _, ok := ConstString(t.info, kv.Key)
		if !ok {
			return "", false
		}
		parts = append(parts, k+" = "+t.sqlValue(kv.Value))
	}
	sort.Strings(parts)
	return strings.Join(parts, " AND "), true
}

// setMap renders SetMap's clauses given as a map literal with constant
// keys, one "column = value" each, in squirrel's sorted key order.
func (t *texter) setMap(e ast.Expr, depth int) ([]string, bool) {
	lit, ok := ast.Unparen(e).(*ast.CompositeLit)
	if !ok || len(lit.Elts) == 0 {
		return nil, false
	}
	if _, ok := t.info.TypeOf(lit).Underlying().(*types.Map); !ok {
		return nil, false
	}
	type kv struct{ k, v string }
	var parts []kv
	for _, el := range lit.Elts {
		p, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return nil, false
		}
		k, _, ok := ConstString(t.info, p.Key)
		if !ok {
			return nil, false
		}
		parts = append(parts, kv{k, t.sqlValue(p.Value)})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].k < parts[j].k })
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.k + " = " + p.v
	}
	return out, true
}
