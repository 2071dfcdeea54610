package facts

import (
	"fmt"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// maxTextDepth bounds how many values StringOf follows from one value.
const maxTextDepth = 8

// globalWrites indexes the stores into the package's variables (and into
// their fields): key is the variable, field -1 for a store of the whole
// value. inInit says whether each store is in the package initializer.
type globalWrites map[globalField][]globalStore

type globalField struct {
	g     *ssa.Global
	field int
}

type globalStore struct {
	val    ssa.Value
	inInit bool
}

// indexGlobals records every store into a package variable of the
// analyzed package, or into one of its fields (SSA does not track a
// global's referrers). A variable whose address (or a field's) goes
// anywhere but into a load or a store is recorded as written outside the
// initializer (field -2).
func indexGlobals(s *SSA) globalWrites {
	out := globalWrites{}
	if s.Pkg == nil {
		return out
	}
	add := func(g *ssa.Global, field int, val ssa.Value, inInit bool) {
		k := globalField{g, field}
		out[k] = append(out[k], globalStore{val, inInit})
	}
	visit := func(fn *ssa.Function, inInit bool) {
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				for _, op := range instr.Operands(nil) {
					g, ok := (*op).(*ssa.Global)
					if !ok || g.Pkg != s.Pkg {
						continue
					}
					switch x := instr.(type) {
					case *ssa.Store:
						if x.Addr == g {
							add(g, -1, x.Val, inInit)
							continue
						}
					case *ssa.UnOp:
						if x.Op == token.MUL {
							continue
						}
					case *ssa.FieldAddr:
						if fieldOnlyLoadsStores(x) {
							for _, ref := range *x.Referrers() {
								if st, ok := ref.(*ssa.Store); ok {
									add(g, x.Field, st.Val, inInit)
								}
							}
							continue
						}
					}
					add(g, -2, nil, false) // the address goes elsewhere
				}
			}
		}
	}
	var walk func(fn *ssa.Function, inInit bool)
	walk = func(fn *ssa.Function, inInit bool) {
		visit(fn, inInit)
		for _, a := range fn.AnonFuncs {
			walk(a, inInit)
		}
	}
	if init := s.Pkg.Func("init"); init != nil {
		walk(init, true)
	}
	for _, fn := range s.SrcFuncs {
		if fn.Parent() == nil {
			walk(fn, false)
		}
	}
	return out
}

// fieldOnlyLoadsStores reports whether the field's address is only loaded
// from and stored into.
func fieldOnlyLoadsStores(fa *ssa.FieldAddr) bool {
	for _, ref := range *fa.Referrers() {
		switch x := ref.(type) {
		case *ssa.Store:
			if x.Addr != fa {
				return false
			}
		case *ssa.UnOp:
			if x.Op != token.MUL {
				return false
			}
		case *ssa.DebugRef:
		default:
			return false
		}
	}
	return true
}

// writtenOutsideInit reports whether a function other than the package
// initializer writes g or its field (or whether g's address goes
// elsewhere).
func (w globalWrites) writtenOutsideInit(g *ssa.Global, field int) bool {
	for k, sts := range w {
		if k.g != g || (k.field != field && k.field != -1 && k.field != -2) {
			continue
		}
		for _, s := range sts {
			if !s.inInit {
				return true
			}
		}
	}
	return false
}

// StringOf returns the string v holds when the code determines it: a
// constant, a concatenation, fmt.Sprintf with a determined format and
// determined string or integer arguments, a package variable of this
// package (or a field of one) that only its initializer writes, or a field
// of a local query struct written once before the read. A value that
// differs by path (a phi), a parameter or a call's result is not
// determined.
func (r *Result) StringOf(v ssa.Value) (string, bool) {
	return r.stringOf(v, 0)
}

func (r *Result) stringOf(v ssa.Value, depth int) (string, bool) {
	if s, ok := ConstString(v); ok {
		return s, true
	}
	if depth > maxTextDepth {
		return "", false
	}
	switch v := v.(type) {
	case *ssa.BinOp:
		if v.Op != token.ADD {
			return "", false
		}
		x, ok1 := r.stringOf(v.X, depth+1)
		y, ok2 := r.stringOf(v.Y, depth+1)
		return x + y, ok1 && ok2
	case *ssa.MakeInterface:
		return r.stringOf(v.X, depth+1)
	case *ssa.ChangeType:
		return r.stringOf(v.X, depth+1)
	case *ssa.Call:
		return r.sprintf(&v.Call, depth)
	case *ssa.UnOp:
		if v.Op != token.MUL {
			return "", false
		}
		return r.load(v, v.X, depth)
	case *ssa.Field:
		return r.structField(v.X, v.Field, depth+1)
	case *ssa.Extract: // query, args, err := b.ToSql()
		if c, ok := v.Tuple.(*ssa.Call); ok && v.Index == 0 && rulekit.Is(CalleeObj(&c.Call), rulekit.PkgSquirrel, "ToSql") && len(c.Call.Args) == 1 {
			return r.squirrel(c.Call.Args[0], depth+1)
		}
	}
	return "", false
}

// squirrel returns the text of a squirrel update or delete builder, rendered as
// blindupdate renders one written as a chain (see rulekit's builder): the
// table, each Set's column and constant value (? for any other), each
// Where's determined text or sq.Eq map with constant keys (in sorted
// order). SSA follows the builder through variables; a builder that
// differs by path (a phi), or a method that changes the statement in a
// way not read here (Suffix, ...), is not determined. SetMap of a map
// made in place with constant keys sets its columns in sorted order, as
// squirrel does.
func (r *Result) squirrel(v ssa.Value, depth int) (string, bool) {
	var sets, wheres []string
	for n := 0; n < 32; n++ {
		call, ok := v.(*ssa.Call)
		if !ok {
			return "", false
		}
		fn := CalleeObj(&call.Call)
		if rulekit.PkgPath(fn) != rulekit.PkgSquirrel || call.Call.IsInvoke() {
			return "", false
		}
		args := call.Call.Args
		recv := fn.Type().(*types.Signature).Recv() != nil
		if recv && len(args) == 0 {
			return "", false
		}
		switch fn.Name() {
		case "Update":
			table, ok := r.stringOf(args[len(args)-1], depth+1)
			if !ok {
				return "", false
			}
			q := "UPDATE " + table + " SET " + strings.Join(sets, ", ")
			if len(wheres) > 0 {
				q += " WHERE " + strings.Join(wheres, " AND ")
			}
			// sq.Update(t), or StatementBuilder.PlaceholderFormat(..).Update(t):
			// the statement builder carries no SQL.
			return q, true
		case "Delete":
			table, ok := r.stringOf(args[len(args)-1], depth+1)
			if !ok || len(sets) > 0 {
				return "", false
			}
			q := "DELETE FROM " + table
			if len(wheres) > 0 {
				q += " WHERE " + strings.Join(wheres, " AND ")
			}
			return q, true
		case "Set":
			if len(args) != 3 {
				return "", false
			}
			col, ok := r.stringOf(args[1], depth+1)
			if !ok {
				return "", false
			}
			sets = append([]string{col + " = " + sqlValue(args[2])}, sets...)
		case "SetMap": // squirrel sets the map's columns in sorted order
			if len(args) != 2 {
				return "", false
			}
			m, ok := setMap(call, args[1])
			if !ok {
				return "", false
			}
			sets = append(m, sets...)
		case "Where":
			if len(args) < 2 {
				return "", false
			}
			w, ok := r.sqWhere(args[1], depth)
			if !ok {
				return "", false
			}
			wheres = append([]string{w}, wheres...)
		case "PlaceholderFormat", "RunWith":
		default:
			return "", false
		}
		v = args[0]
	}
	return "", false
}

// sqlValue renders a value given to a builder: a constant as a SQL
// literal, anything else as a placeholder.
func sqlValue(v ssa.Value) string {
	c, ok := unwrap(v).(*ssa.Const)
	if !ok || c.Value == nil {
		return "?"
	}
	if c.Value.Kind() == constant.String {
		return "'" + strings.ReplaceAll(constant.StringVal(c.Value), "'", "''") + "'"
	}
	return c.Value.ExactString()
}

// sqWhere renders a Where predicate: determined text, or an sq.Eq map
// made in place whose keys are constant.
func (r *Result) sqWhere(v ssa.Value, depth int) (string, bool) {
	if s, ok := r.stringOf(v, depth+1); ok {
		return s, true
	}
	m, ok := unwrap(v).(*ssa.MakeMap)
	if !ok {
		return "", false
	}
	if p, n := rulekit.NamedOf(m.Type()); p != rulekit.PkgSquirrel || n != "Eq" {
		return "", false
	}
	var parts []string
	for _, ref := range *m.Referrers() {
		switch x := ref.(type) {
		case *ssa.MapUpdate:
			k, ok := ConstString(unwrap(x.Key))
			if !ok {
				return "", false
			}
			parts = append(parts, k+" = "+sqlValue(x.Value))
		case *ssa.MakeInterface, *ssa.DebugRef:
		default:
			return "", false // read or changed elsewhere
		}
	}
	if len(parts) == 0 {
		return "", false
	}
	sort.Strings(parts)
	return strings.Join(parts, " AND "), true
}

// setMap renders SetMap's clauses given as a map made in place whose keys
// are constant, each set once in the SetMap call's block before it, and
// which nothing but that call reads or changes: one "column = value" each,
// in squirrel's sorted key order. A write after the call would not change
// the statement, but is not told apart from one on another path: not
// determined.
func setMap(call *ssa.Call, v ssa.Value) ([]string, bool) {
	m, ok := v.(*ssa.MakeMap)
	if !ok {
		return nil, false
	}
	type kv struct{ k, v string }
	var parts []kv
	seen := map[string]bool{}
	for _, ref := range *m.Referrers() {
		switch x := ref.(type) {
		case *ssa.MapUpdate:
			k, ok := ConstString(unwrap(x.Key))
			if !ok || !precedes(x, call) || seen[k] {
				return nil, false // set on another path, or twice
			}
			seen[k] = true
			parts = append(parts, kv{k, sqlValue(x.Value)})
		case *ssa.DebugRef:
		case *ssa.Call:
			if x != call {
				return nil, false // given to another call too
			}
		default:
			return nil, false // read or changed elsewhere
		}
	}
	if len(parts) == 0 {
		return nil, false
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].k < parts[j].k })
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.k + " = " + p.v
	}
	return out, true
}

// precedes reports whether instruction a comes before b in b's block.
// squirrel reads SetMap's map when SetMap is called: a write after it
// does not change the statement, one on another path might.
func precedes(a, b ssa.Instruction) bool {
	if a.Block() != b.Block() {
		return false
	}
	for _, in := range b.Block().Instrs {
		switch in {
		case a:
			return true
		case b:
			return false
		}
	}
	return false
}

// load evaluates a load from addr: a package variable, a field of one, or
// a field of a local struct.
func (r *Result) load(at ssa.Instruction, addr ssa.Value, depth int) (string, bool) {
	switch a := addr.(type) {
	case *ssa.Global:
		return r.global(a, -1, depth)
	case *ssa.FieldAddr:
		switch x := a.X.(type) {
		case *ssa.Global:
			return r.global(x, a.Field, depth)
		case *ssa.Alloc:
			return r.allocField(x, a.Field, at, depth)
		}
	}
	return "", false
}

// global evaluates package variable g (field -1) or its field, when only
// the package initializer writes it, once.
func (r *Result) global(g *ssa.Global, field int, depth int) (string, bool) {
	if r.SSA.Pkg == nil || g.Pkg != r.SSA.Pkg || r.globals.writtenOutsideInit(g, field) {
		return "", false
	}
	whole := r.globals[globalField{g, -1}]
	if field < 0 {
		if len(whole) != 1 {
			return "", false
		}
		return r.stringOf(whole[0].val, depth+1)
	}
	parts := r.globals[globalField{g, field}]
	switch {
	case len(parts) == 1 && len(whole) == 0:
		return r.stringOf(parts[0].val, depth+1)
	case len(parts) == 0 && len(whole) == 1:
		return r.structField(whole[0].val, field, depth+1)
	}
	return "", false
}

// structField evaluates field i of struct value v, a load of a local
// struct (a composite literal's).
func (r *Result) structField(v ssa.Value, i int, depth int) (string, bool) {
	if depth > maxTextDepth {
		return "", false
	}
	if u, ok := v.(*ssa.UnOp); ok && u.Op == token.MUL {
		if a, ok := u.X.(*ssa.Alloc); ok {
			return r.allocField(a, i, u, depth)
		}
	}
	return "", false
}

// allocField evaluates field i of local struct a at the read at: a is
// only read (field by field or whole) and written once, field i or the
// whole struct, before the read on every path.
func (r *Result) allocField(a *ssa.Alloc, i int, at ssa.Instruction, depth int) (string, bool) {
	var store *ssa.Store
	whole := false
	for _, ref := range *a.Referrers() {
		switch x := ref.(type) {
		case *ssa.FieldAddr:
			if !fieldOnlyLoadsStores(x) {
				return "", false // the field's address escapes (a call, a closure)
			}
			if x.Field != i {
				continue
			}
			for _, fr := range *x.Referrers() {
				if st, ok := fr.(*ssa.Store); ok {
					if store != nil {
						return "", false // written twice
					}
					store = st
				}
			}
		case *ssa.Store:
			if x.Addr != a || store != nil {
				return "", false
			}
			store, whole = x, true
		case *ssa.UnOp:
			if x.Op != token.MUL {
				return "", false
			}
		case *ssa.DebugRef:
		default:
			return "", false // passed by pointer or captured
		}
	}
	if store == nil || !before(store, at) {
		return "", false
	}
	if whole {
		return r.structField(store.Val, i, depth+1)
	}
	return r.stringOf(store.Val, depth+1)
}

// before reports whether instruction a runs before b on every path to b.
func before(a, b ssa.Instruction) bool {
	ab, bb := a.Block(), b.Block()
	if ab != bb {
		return ab.Dominates(bb)
	}
	for _, instr := range ab.Instrs {
		switch instr {
		case a:
			return true
		case b:
			return false
		}
	}
	return false
}

// sprintf evaluates fmt.Sprintf with a determined format and arguments.
func (r *Result) sprintf(c *ssa.CallCommon, depth int) (string, bool) {
	if fn := CalleeObj(c); fn == nil || !rulekit.Is(fn, "fmt", "Sprintf") {
		return "", false
	}
	if len(c.Args) != 2 {
		return "", false
	}
	format, ok := r.stringOf(c.Args[0], depth+1)
	if !ok {
		return "", false
	}
	args, ok := variadicArgs(c.Args[1])
	if !ok {
		return "", false
	}
	var vals []any
	for _, a := range args {
		if k, ok := unwrap(a).(*ssa.Const); ok && k.Value != nil && k.Value.Kind() == constant.Int {
			n, exact := constant.Int64Val(k.Value)
			if !exact {
				return "", false
			}
			vals = append(vals, n)
			continue
		}
		s, ok := r.stringOf(unwrap(a), depth+1)
		if !ok {
			return "", false
		}
		vals = append(vals, s)
	}
	out := fmt.Sprintf(format, vals...)
	if strings.Contains(out, "%!") {
		return "", false // a verb the arguments do not fit
	}
	return out, true
}

// variadicArgs returns the elements of a variadic argument built at the
// call (nil for none), in order.
func variadicArgs(v ssa.Value) ([]ssa.Value, bool) {
	if k, ok := v.(*ssa.Const); ok && k.IsNil() {
		return nil, true
	}
	sl, ok := v.(*ssa.Slice)
	if !ok {
		return nil, false
	}
	al, ok := sl.X.(*ssa.Alloc)
	if !ok {
		return nil, false
	}
	arr, ok := al.Type().Underlying().(*types.Pointer)
	if !ok {
		return nil, false
	}
	at, ok := arr.Elem().Underlying().(*types.Array)
	if !ok {
		return nil, false
	}
	out := make([]ssa.Value, at.Len())
	for _, ref := range *al.Referrers() {
		ia, ok := ref.(*ssa.IndexAddr)
		if !ok {
			continue
		}
		k, ok := ia.Index.(*ssa.Const)
		if !ok {
			return nil, false
		}
		i, exact := constant.Int64Val(k.Value)
		if !exact || i < 0 || i >= int64(len(out)) {
			return nil, false
		}
		for _, r2 := range *ia.Referrers() {
			if st, ok := r2.(*ssa.Store); ok && st.Addr == ia {
				if out[i] != nil {
					return nil, false
				}
				out[i] = st.Val
			}
		}
	}
	for _, a := range out {
		if a == nil {
			return nil, false
		}
	}
	return out, true
}
