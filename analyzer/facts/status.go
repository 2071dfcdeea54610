package facts

import (
	"regexp"
	"strconv"
	"strings"

	"go/token"
	"go/types"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

var (
	reSQLUpdateSet = regexp.MustCompile(`(?is)^\s*update\s+(?:only\s+)?("?[\w.]+"?)(?:\s+(?:as\s+)?\w+)?\s+set\s+(.+?)(?:\s+(?:where|from|returning)\s+.*)?\s*;?\s*$`)
	reSQLInsert    = regexp.MustCompile(`(?is)^\s*insert\s+into\s+("?[\w.]+"?)\s*\(([^)]*)\)\s*values\s*\(`)
	reSQLColumn    = regexp.MustCompile(`(?i)^(?:"?\w+"?\.)?"?(\w+)"?$`)
	reSQLStateCol  = regexp.MustCompile(`(?i)^(\w*_)?(state|status)$`)
	reSQLDollar    = regexp.MustCompile(`^\$(\d+)(?:\s*::\s*[\w.]+)?$`)
)

// sqlStatusSlots reads an UPDATE .. SET or an INSERT .. VALUES: the
// table, and for each state/status column it writes from a positional
// placeholder ($n, or the n-th ?), the placeholder's index among the
// statement's arguments (0-based). parsed is false when q is not one of
// these shapes; named is true when a state column is written from a
// placeholder that is not positional (@status, :status, sqlc.arg).
func sqlStatusSlots(q string) (table string, slots map[int]string, named, parsed bool) {
	q = rulekit.StripComments(q)
	q = numberQuestionMarks(q)
	slots = map[int]string{}
	slot := func(col, rhs string) {
		cm := reSQLColumn.FindStringSubmatch(strings.TrimSpace(col))
		if cm == nil || !reSQLStateCol.MatchString(cm[1]) {
			return
		}
		if m := reSQLDollar.FindStringSubmatch(strings.TrimSpace(rhs)); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				slots[n-1] = strings.ToLower(cm[1])
			}
			return
		}
		rhs = strings.TrimSpace(rhs)
		if strings.HasPrefix(rhs, "@") || strings.HasPrefix(rhs, ":") || strings.HasPrefix(strings.ToLower(rhs), "sqlc.") {
			named = true
		}
	}
	if m := reSQLUpdateSet.FindStringSubmatch(q); m != nil {
		for _, a := range rulekit.SplitTop(m[2], ',') {
			if col, rhs, ok := strings.Cut(a, "="); ok {
				slot(col, rhs)
			}
		}
		return strings.Trim(m[1], `"`), slots, named, true
	}
	if m := reSQLInsert.FindStringSubmatchIndex(q); m != nil {
		values, ok := rulekit.UntilClose(q[m[1]:])
		if !ok {
			return "", nil, false, false
		}
		cols, vals := rulekit.SplitTop(q[m[4]:m[5]], ','), rulekit.SplitTop(values, ',')
		if len(cols) != len(vals) {
			return "", nil, false, false
		}
		for i := range cols {
			slot(cols[i], vals[i])
		}
		return strings.Trim(q[m[2]:m[3]], `"`), slots, named, true
	}
	return "", nil, false, false
}

// numberQuestionMarks turns the ? placeholders of q (outside quotes) into
// $1, $2, ... in order.
func numberQuestionMarks(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n, quote := 0, false
	for i := 0; i < len(q); i++ {
		switch ch := q[i]; {
		case ch == '\'':
			quote = !quote
			b.WriteByte(ch)
		case ch == '?' && !quote:
			n++
			b.WriteString("$" + strconv.Itoa(n))
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// sqlArgs returns the arguments of a SQL call that follow its text, in
// order (a variadic slice built at the call expanded).
func sqlArgs(c *ssa.CallCommon) ([]ssa.Value, bool) {
	for i, a := range c.Args {
		if b, ok := a.Type().Underlying().(*types.Basic); !ok || b.Kind() != types.String {
			continue
		}
		rest := c.Args[i+1:]
		if len(rest) == 0 {
			return nil, true
		}
		last := rest[len(rest)-1]
		if _, isSlice := last.Type().Underlying().(*types.Slice); isSlice && c.Signature().Variadic() {
			els, ok := variadicArgs(last)
			if !ok {
				return nil, false
			}
			return append(append([]ssa.Value(nil), rest[:len(rest)-1]...), els...), true
		}
		return rest, true
	}
	return nil, false
}

// paramSlot tells which parameter of fn v is, or which field of one: the
// parameter's index (-1 when neither) and the field's name.
func paramSlot(fn *ssa.Function, v ssa.Value) (int, string) {
	v = unwrap(v)
	if i := paramIndex(fn, v); i >= 0 {
		return i, ""
	}
	x, path := fieldChain(v)
	if x == nil {
		return -1, ""
	}
	if i := paramIndex(fn, x); i >= 0 {
		return i, path
	}
	if a, ok := x.(*ssa.Alloc); ok {
		if i := spilledParam(fn, a); i >= 0 {
			return i, path
		}
	}
	return -1, ""
}

// fieldChain: v is a field read, *(&p.Status) or p.Status of a struct
// value, also through structs embedded by value (*(&p.Base.Status)); the
// struct read from and the field's path ("Status", "Base.Status"). Nil
// when v is none of these, or a field of a field that is not embedded.
func fieldChain(v ssa.Value) (ssa.Value, string) {
	var names []string
	add := func(t types.Type, i int) bool {
		if len(names) > 0 && !embeddedField(t, i) {
			return false
		}
		names = append([]string{fieldName(t, i)}, names...)
		return true
	}
	switch u := v.(type) {
	case *ssa.UnOp: // *(&p.Status)
		if u.Op != token.MUL {
			return nil, ""
		}
		v = u.X
		for {
			fa, ok := v.(*ssa.FieldAddr)
			if !ok {
				break
			}
			if !add(fa.X.Type(), fa.Field) {
				return nil, ""
			}
			v = fa.X
		}
	case *ssa.Field: // p.Status of a struct value
		for {
			f, ok := v.(*ssa.Field)
			if !ok {
				break
			}
			if !add(f.X.Type(), f.Field) {
				return nil, ""
			}
			v = f.X
		}
	}
	if len(names) == 0 {
		return nil, ""
	}
	return v, strings.Join(names, ".")
}

// embeddedField: field i of the struct t is (or points to) is embedded.
func embeddedField(t types.Type, i int) bool {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	s, ok := t.Underlying().(*types.Struct)
	return ok && i < s.NumFields() && s.Field(i).Embedded()
}

// spilledParam: a is the variable of a struct parameter whose fields are
// read (SSA keeps it in memory), written only by the parameter's value;
// its index, or -1.
func spilledParam(fn *ssa.Function, a *ssa.Alloc) int {
	idx := -1
	for _, ref := range *a.Referrers() {
		switch x := ref.(type) {
		case *ssa.Store:
			if x.Addr != a || idx >= 0 {
				return -1
			}
			if idx = paramIndex(fn, x.Val); idx < 0 {
				return -1
			}
		case *ssa.FieldAddr:
			for _, fr := range *x.Referrers() {
				if u, ok := fr.(*ssa.UnOp); !ok || u.Op != token.MUL {
					if _, dbg := fr.(*ssa.DebugRef); !dbg {
						return -1
					}
				}
			}
		case *ssa.UnOp:
			if x.Op != token.MUL {
				return -1
			}
		case *ssa.DebugRef:
		default:
			return -1
		}
	}
	return idx
}

// statusSink returns what c, called in fn, writes into a state/status
// column from fn's parameters: SQL whose SET or VALUES puts a parameter
// (or a field of one) into a state or status column, an ORM write of a
// parameter's model (its state/status field) or of a parameter as the
// value of a status column, a go-redis Set/HSet of a parameter named or
// typed for a status, or a helper known to write its own parameter.
func (r *Result) statusSink(fn *ssa.Function, c *ssa.CallCommon) *StatusWriter {
	if q, ok := r.SQLOf(c); ok && (reInsert.MatchString(q) || reUpdate.MatchString(q)) {
		table, slots, named, parsed := sqlStatusSlots(q)
		if parsed && !named {
			args, ok := sqlArgs(c)
			if !ok {
				return nil
			}
			for i := 0; i < len(args); i++ {
				col, ok := slots[i]
				if !ok {
					continue
				}
				if p, f := paramSlot(fn, args[i]); p >= 0 {
					return &StatusWriter{Param: p, Field: f, Column: table + "." + col}
				}
			}
			return nil
		}
		if parsed && len(slots) == 0 && !named {
			return nil
		}
		return namedStatusParam(fn, flatArgs(c))
	}
	if cmd := redisCmd(c); cmd == "Set" || cmd == "HSet" || cmd == "SetArgs" {
		return namedStatusParam(fn, flatArgs(c))
	}
	if sw := ormStatusSink(fn, c); sw != nil {
		return sw
	}
	sf := StaticFn(c)
	if sf == nil {
		return nil
	}
	var sw *StatusWriter
	if s := r.local(sf); s != nil {
		sw = s.Status
	} else if o, ok := sf.Object().(*types.Func); ok {
		var f StatusWriter
		if r.Pass.ImportObjectFact(o, &f) {
			sw = &f
		}
	}
	if sw == nil || sw.Param >= len(c.Args) {
		return nil
	}
	p, f := paramSlot(fn, c.Args[sw.Param])
	switch {
	case p < 0:
		return nil
	case sw.Field == "":
		return &StatusWriter{Param: p, Field: f, Column: sw.Column}
	case f == "":
		return &StatusWriter{Param: p, Field: sw.Field, Column: sw.Column}
	}
	return nil
}

// namedStatusParam: a parameter named or typed for a state or status
// among args (when the statement's columns cannot be read).
func namedStatusParam(fn *ssa.Function, args []ssa.Value) *StatusWriter {
	for _, a := range args {
		if i := paramIndex(fn, a); i >= 0 {
			p := fn.Params[i]
			_, tn := rulekit.NamedOf(p.Type())
			if reStatusParam.MatchString(p.Name()) || reStatusParam.MatchString(tn) {
				return &StatusWriter{Param: i}
			}
		}
	}
	return nil
}

// ormStatusWrites are the ORM methods that write a model's fields.
var ormStatusWrites = map[string]bool{
	"Save": true, "Updates": true, "Create": true, "Insert": true, "Upsert": true, "UpdateColumns": true,
	"ValidateAndSave": true, "ValidateAndUpdate": true, "ValidateAndCreate": true,
}

// ormStatusSink: gorm, bun or pop writing a parameter's model, whose
// state/status field is then written (Save(p)), or a parameter as the
// value of a status column (Update("status", st)).
func ormStatusSink(fn *ssa.Function, c *ssa.CallCommon) *StatusWriter {
	fo := CalleeObj(c)
	if fo == nil || !ormPkg(fo) {
		return nil
	}
	args := flatArgs(c)
	if !c.IsInvoke() && len(args) > 0 {
		args = args[1:]
	}
	if (fo.Name() == "Update" || fo.Name() == "UpdateColumn") && len(args) == 2 {
		if col, ok := ConstString(unwrap(args[0])); ok && reSQLStateCol.MatchString(rulekit.Snake(col)) {
			if p, f := paramSlot(fn, args[1]); p >= 0 {
				return &StatusWriter{Param: p, Field: f, Column: rulekit.Snake(col)}
			}
		}
		return nil
	}
	if !ormStatusWrites[fo.Name()] {
		return nil
	}
	for _, a := range args {
		i := paramIndex(fn, a)
		if i < 0 {
			continue
		}
		if f := stateField(fn.Params[i].Type()); f != "" {
			return &StatusWriter{Param: i, Field: f}
		}
	}
	return nil
}

// stateField returns the name of the state/status field of the struct t
// is (or points to), or "". A field promoted from a struct embedded by
// value (two levels at most) is named by its path: "Base.Status".
func stateField(t types.Type) string {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	return statePath(t, 0)
}

func statePath(t types.Type, depth int) string {
	st, ok := t.Underlying().(*types.Struct)
	if !ok {
		return ""
	}
	for i := 0; i < st.NumFields(); i++ {
		if reStateField.MatchString(st.Field(i).Name()) {
			return st.Field(i).Name()
		}
	}
	if depth >= 2 {
		return ""
	}
	for i := 0; i < st.NumFields(); i++ {
		if f := st.Field(i); f.Embedded() {
			if s := statePath(f.Type(), depth+1); s != "" {
				return f.Name() + "." + s
			}
		}
	}
	return ""
}

// fieldPath resolves a field path ("Status", "Base.Status") in the struct
// t to its field indices.
func fieldPath(t types.Type, path string) []int {
	var idx []int
	for _, name := range strings.Split(path, ".") {
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return nil
		}
		k := -1
		for i := 0; i < st.NumFields(); i++ {
			if st.Field(i).Name() == name {
				k = i
			}
		}
		if k < 0 {
			return nil
		}
		idx = append(idx, k)
		t = st.Field(k).Type()
	}
	return idx
}

// addrPath reports whether v is the address of the field at path (or,
// with a shorter path, of the embedded struct on the way) of the struct
// base points to: FieldAddr instructions chained from base.
func addrPath(v, base ssa.Value, path []int) bool {
	for i := len(path) - 1; i >= 0; i-- {
		fa, ok := v.(*ssa.FieldAddr)
		if !ok || fa.Field != path[i] {
			return false
		}
		v = fa.X
	}
	return v == base
}

// failedStatus reports whether the call c gives the status writer sw a
// failed-like state: a constant at its parameter, or, when sw writes a
// field, a struct whose field every store reaching the call sets to one.
// shift is 1 for an interface call (whose arguments lack the receiver).
func (r *Result) failedStatus(c *ssa.CallCommon, sw *StatusWriter, shift int) bool {
	i := sw.Param - shift
	if i < 0 || i >= len(c.Args) {
		return false
	}
	arg := unwrap(c.Args[i])
	if sw.Field == "" {
		return isFailedConst(arg)
	}
	at := callInstr(arg, c)
	if at == nil {
		return false
	}
	base := arg
	if u, ok := arg.(*ssa.UnOp); ok && u.Op == token.MUL {
		if a, ok := u.X.(*ssa.Alloc); ok { // a struct value: read where it is loaded
			base, at = a, u
		}
	}
	ptr, ok := base.Type().Underlying().(*types.Pointer)
	if !ok {
		return false
	}
	path := fieldPath(ptr.Elem(), sw.Field)
	if path == nil {
		return false
	}
	return r.fieldFailedAt(base, path, at)
}

// callInstr returns the instruction of call c, found in the function of
// one of its arguments v.
func callInstr(v ssa.Value, c *ssa.CallCommon) ssa.Instruction {
	var fn *ssa.Function
	if in, ok := v.(ssa.Instruction); ok {
		fn = in.Parent()
	} else if p, ok := v.(*ssa.Parameter); ok {
		fn = p.Parent()
	}
	if fn == nil {
		return nil
	}
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if ci, ok := instr.(ssa.CallInstruction); ok && ci.Common() == c {
				return instr
			}
		}
	}
	return nil
}

// fieldFailedAt reports whether every store into the field at path (one
// index, or more through embedded structs) of the struct base points to
// that reaches at (walking back on every path) sets a failed-like state;
// a setter (a FieldSet) given the struct that declares the field counts as
// a store of the value it sets. A path that reaches the struct's
// allocation or the function's entry with no store, stores the embedded
// struct whole, or passes any other call given the struct (or the
// embedded struct), leaves the field unknown: not failed.
func (r *Result) fieldFailedAt(base ssa.Value, path []int, at ssa.Instruction) bool {
	type item struct {
		b   *ssa.BasicBlock
		end int // instructions before this index
	}
	idx := -1
	for k, instr := range at.Block().Instrs {
		if instr == at {
			idx = k
		}
	}
	if idx < 0 || len(path) == 0 {
		return false
	}
	name := ""
	if ptr, ok := base.Type().Underlying().(*types.Pointer); ok {
		t := ptr.Elem()
		for _, i := range path {
			name = fieldName(t, i)
			if st, ok := t.Underlying().(*types.Struct); ok && i < st.NumFields() {
				t = st.Field(i).Type()
			}
		}
	}
	last := len(path) - 1
	// within: v is base or the address of an embedded struct on the path.
	within := func(v ssa.Value) bool {
		for k := 0; k < len(path); k++ {
			if addrPath(v, base, path[:k]) {
				return true
			}
		}
		return false
	}
	seen := map[*ssa.BasicBlock]bool{}
	work := []item{{at.Block(), idx}}
	found := false
	for len(work) > 0 {
		it := work[len(work)-1]
		work = work[:len(work)-1]
		stopped := false
		for k := it.end - 1; k >= 0 && !stopped; k-- {
			switch x := it.b.Instrs[k].(type) {
			case *ssa.Store:
				switch {
				case addrPath(x.Addr, base, path):
					if !isFailedConst(unwrap(x.Val)) {
						return false
					}
					found, stopped = true, true
				case x.Addr == base && last == 0:
					s, ok := r.structField(x.Val, path[0], 0)
					if !ok || !reFailed.MatchString(s) {
						return false
					}
					found, stopped = true, true
				case within(x.Addr):
					return false // the struct, or the embedded one, stored whole
				}
			case ssa.CallInstruction:
				c := x.Common()
				setter := -1            // the argument a setter of the field is given the struct at
				_, now := x.(*ssa.Call) // not go or defer: those set it later
				if fs := r.setterCall(c); now && fs != nil && fs.Field == name && fs.Param < len(c.Args) && addrPath(c.Args[fs.Param], base, path[:last]) {
					failed := reFailed.MatchString(fs.Value)
					if fs.Arg >= 0 {
						failed = fs.Arg < len(c.Args) && isFailedConst(unwrap(c.Args[fs.Arg]))
					}
					if !failed {
						return false // a state other than a failed one
					}
					setter = fs.Param
				}
				for k, a := range c.Args {
					if k != setter && within(a) {
						return false // it may set the field
					}
				}
				if setter >= 0 {
					found, stopped = true, true
				}
			case ssa.Value:
				if x == base {
					return false // allocated here, the field not set
				}
			}
		}
		if stopped {
			continue
		}
		if len(it.b.Preds) == 0 {
			return false // the value from before the function
		}
		for _, p := range it.b.Preds {
			if !seen[p] {
				seen[p] = true
				work = append(work, item{p, len(p.Instrs)})
			}
		}
	}
	return found
}

// invokeStatus: every implementation of an interface method writes the
// same parameter (or field of one) into a state/status column.
func (p *Program) invokeStatus(iface *types.Interface, m *types.Func) (string, *StatusWriter) {
	return agreed(p, iface, m, func(s *MethodSummary) *StatusWriter { return s.Status },
		func(a, b *StatusWriter) bool { return a.Param == b.Param && a.Field == b.Field })
}

// fieldSetOf returns the setter summary of fn: the state/status field of
// one of its pointer parameters stored once, in a block that dominates
// every return, with a constant or another parameter, the parameter used
// only to address its fields (given to no call, stored nowhere, so that
// nothing after the store can change the field again). Nil otherwise.
func fieldSetOf(fn *ssa.Function) *FieldSet {
	if len(fn.Blocks) == 0 {
		return nil
	}
	var rets []*ssa.BasicBlock
	for _, b := range fn.Blocks {
		if len(b.Instrs) > 0 {
			if _, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return); ok {
				rets = append(rets, b)
			}
		}
	}
	if len(rets) == 0 {
		return nil
	}
	for i, p := range fn.Params {
		ptr, ok := p.Type().Underlying().(*types.Pointer)
		if !ok {
			continue
		}
		st, ok := ptr.Elem().Underlying().(*types.Struct)
		if !ok {
			continue
		}
		name := stateField(p.Type())
		if name == "" || strings.Contains(name, ".") {
			continue // a promoted field: not summarised
		}
		field := -1
		for k := 0; k < st.NumFields(); k++ {
			if st.Field(k).Name() == name {
				field = k
			}
		}
		if fs := setterStore(fn, p, field, rets); fs != nil {
			fs.Param, fs.Field = i, name
			return fs
		}
	}
	return nil
}

// setterStore: the one store into field of p, dominating every return,
// of a constant or a parameter; p used only through FieldAddr.
func setterStore(fn *ssa.Function, p *ssa.Parameter, field int, rets []*ssa.BasicBlock) *FieldSet {
	var store *ssa.Store
	for _, ref := range *p.Referrers() {
		switch x := ref.(type) {
		case *ssa.DebugRef:
		case *ssa.FieldAddr:
			if x.Field != field {
				continue
			}
			for _, fr := range *x.Referrers() {
				switch y := fr.(type) {
				case *ssa.DebugRef:
				case *ssa.Store:
					if y.Addr != x || store != nil {
						return nil
					}
					store = y
				default:
					return nil // read, or its address taken
				}
			}
		default:
			return nil // given to a call, stored, compared, ...
		}
	}
	if store == nil {
		return nil
	}
	for _, b := range rets {
		if !store.Block().Dominates(b) {
			return nil
		}
	}
	v := unwrap(store.Val)
	if s, ok := ConstString(v); ok {
		return &FieldSet{Arg: -1, Value: s}
	}
	if a := paramIndex(fn, v); a >= 0 {
		return &FieldSet{Arg: a}
	}
	return nil
}

// setterCall: the setter summary of the function c calls statically, from
// this package's summaries or an imported fact.
func (r *Result) setterCall(c *ssa.CallCommon) *FieldSet {
	sf := StaticFn(c)
	if sf == nil {
		return nil
	}
	if s := r.local(sf); s != nil {
		return s.Sets
	}
	o, ok := sf.Object().(*types.Func)
	if !ok {
		return nil
	}
	var fs FieldSet
	if r.Pass.ImportObjectFact(o, &fs) {
		return &fs
	}
	return nil
}
