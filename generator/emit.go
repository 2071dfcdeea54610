package generator

import (
	"bytes"
	"fmt"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"
)

// predeclared are the identifiers of the universe scope; a generated
// identifier never takes one of them, so that no builtin is shadowed.
var predeclared = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range types.Universe.Names() {
		m[n] = true
	}
	return m
}()

// namer hands out identifiers that clash with nothing taken.
type namer map[string]bool

func (n namer) clone() namer {
	c := make(namer, len(n))
	for k, v := range n {
		c[k] = v
	}
	return c
}

func (n namer) free(name string) bool {
	return name != "" && name != "_" && !n[name] && !predeclared[name] && !token.IsKeyword(name)
}

// fresh returns base, or base2, base3, ... whichever is free first, and
// takes it.
func (n namer) fresh(base string) string {
	name := base
	for i := 2; !n.free(name); i++ {
		name = base + strconv.Itoa(i)
	}
	n[name] = true
	return name
}

// emitter writes the file of one service.
type emitter struct {
	s       *Service
	f       *jen.File
	names   namer             // file scope: package-scope names and imports
	imports map[string]string // path -> name in the file

	// Fields of the wrapper: "inner" and "rt" unless the service has
	// methods of those names, and the method values of inner that the
	// runtime calls (effects and queries of remote ops), by method name:
	// made once by the constructor, as a method value made per call
	// would be allocated per call.
	innerField, rtField string
	funcFields          map[string]string
	funcOrder           []string

	// anyTaken: the package declares its own any, so the empty interface
	// is written interface{} (review r54: []any{...} named the package's).
	anyTaken bool
}

// Emit renders the generated file of s. taken holds the package-scope
// names of s's package (including everything idemgen generates into it).
func Emit(s *Service, taken map[string]bool) ([]byte, error) {
	e := &emitter{s: s, f: jen.NewFilePathName(s.Pkg.Path(), s.Pkg.Name()), names: namer(taken).clone(), imports: map[string]string{}, anyTaken: taken["any"]}
	e.planImports()
	fields := namer{}
	for _, m := range s.Methods {
		fields[m.Name] = true
	}
	e.innerField, e.rtField = fields.fresh("inner"), fields.fresh("rt")
	e.funcFields = map[string]string{}
	for _, m := range s.Methods {
		if m.Skip || m.Effect == Local {
			continue
		}
		for _, name := range []string{m.Name, m.Reconcile} {
			if name != "" && e.funcFields[name] == "" {
				e.funcFields[name] = fields.fresh(lowerFirst(name))
				e.funcOrder = append(e.funcOrder, name)
			}
		}
	}
	e.f.HeaderComment(Header + "\n\n" + wrapperConstraint(s.Build))
	e.file()
	var buf bytes.Buffer
	if err := e.f.Render(&buf); err != nil {
		return nil, fmt.Errorf("idemgen: rendering %s: %w", s.File, err)
	}
	return groupImports(buf.Bytes()), nil
}

// planImports names every package the file refers to before any code is
// written, so that parameter names can avoid them. Packages are named after
// themselves (the runtime after "idem", since "runtime" is the standard
// library's); a name that clashes with a package-scope identifier or another
// import gets a number.
func (e *emitter) planImports() {
	paths := map[string]*types.Package{}
	need := func(path, name string) { paths[path] = types.NewPackage(path, name) }
	need(RuntimePath, "idem")
	for _, m := range e.s.Methods {
		collectPackages(m.Sig, e.s.Pkg, paths, map[types.Type]bool{})
		if m.Skip {
			continue
		}
		if m.Lease > 0 || m.TTL > 0 {
			need("time", "time")
		}
		if len(m.Fingerprint) > 0 {
			need("encoding/json", "json")
		}
		for _, g := range e.guards(m) {
			if g.key {
				need("fmt", "fmt")
			} else {
				need("errors", "errors")
			}
		}
		if len(m.Fingerprint) > 0 || m.Scope != nil {
			need("fmt", "fmt")
		}
		if m.Effect == Local {
			need(PgstorePath, "pgstore")
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	slices.Sort(sorted)
	for _, p := range sorted {
		base := paths[p].Name()
		if p == RuntimePath {
			base = "idem"
		}
		name := e.names.fresh(base)
		e.imports[p] = name
		if name == pathBase(p) {
			e.f.ImportName(p, name)
		} else {
			e.f.ImportAlias(p, name)
		}
	}
}

// pathBase is the name an import path gets without an alias, by the usual
// convention: its last element, skipping a major version suffix.
func pathBase(p string) string {
	parts := strings.Split(p, "/")
	last := parts[len(parts)-1]
	if len(parts) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = parts[len(parts)-2]
	}
	return last
}

// collectPackages adds the packages t refers to, other than pkg.
func collectPackages(t types.Type, pkg *types.Package, out map[string]*types.Package, seen map[types.Type]bool) {
	if seen[t] {
		return
	}
	seen[t] = true
	rec := func(t types.Type) { collectPackages(t, pkg, out, seen) }
	addObj := func(obj *types.TypeName, args *types.TypeList) {
		if p := obj.Pkg(); p != nil && p != pkg {
			out[p.Path()] = p
		}
		for i := range args.Len() {
			rec(args.At(i))
		}
	}
	switch t := t.(type) {
	case *types.Alias:
		addObj(t.Obj(), t.TypeArgs())
	case *types.Named:
		addObj(t.Obj(), t.TypeArgs())
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			out["unsafe"] = types.Unsafe
		}
	case *types.Pointer:
		rec(t.Elem())
	case *types.Slice:
		rec(t.Elem())
	case *types.Array:
		rec(t.Elem())
	case *types.Map:
		rec(t.Key())
		rec(t.Elem())
	case *types.Chan:
		rec(t.Elem())
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tup.Len() {
				rec(tup.At(i).Type())
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			rec(t.Field(i).Type())
		}
	case *types.Interface:
		for i := range t.NumExplicitMethods() {
			rec(t.ExplicitMethod(i).Type())
		}
		for i := range t.NumEmbeddeds() {
			rec(t.EmbeddedType(i))
		}
	case *types.Union:
		for i := range t.Len() {
			rec(t.Term(i).Type())
		}
	}
}

func (e *emitter) qual(path, name string) *jen.Statement {
	return jen.Qual(path, name)
}

func (e *emitter) idem(name string) *jen.Statement { return e.qual(RuntimePath, name) }

// typ renders t as the package being generated spells it.
func (e *emitter) typ(t types.Type) *jen.Statement {
	named := func(obj *types.TypeName, args *types.TypeList) *jen.Statement {
		var s *jen.Statement
		if obj.Pkg() == nil || obj.Pkg() == e.s.Pkg {
			s = jen.Id(obj.Name())
		} else {
			s = e.qual(obj.Pkg().Path(), obj.Name())
		}
		if args.Len() > 0 {
			var cs []jen.Code
			for i := range args.Len() {
				cs = append(cs, e.typ(args.At(i)))
			}
			s = s.Types(cs...)
		}
		return s
	}
	switch t := t.(type) {
	case *types.Alias:
		return named(t.Obj(), t.TypeArgs())
	case *types.Named:
		return named(t.Obj(), t.TypeArgs())
	case *types.TypeParam:
		return jen.Id(t.Obj().Name())
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			return e.qual("unsafe", "Pointer")
		}
		return jen.Id(t.Name())
	case *types.Pointer:
		return jen.Op("*").Add(e.typ(t.Elem()))
	case *types.Slice:
		return jen.Index().Add(e.typ(t.Elem()))
	case *types.Array:
		return jen.Index(jen.Lit(int(t.Len()))).Add(e.typ(t.Elem()))
	case *types.Map:
		return jen.Map(e.typ(t.Key())).Add(e.typ(t.Elem()))
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return jen.Chan().Op("<-").Add(e.typ(t.Elem()))
		case types.RecvOnly:
			return jen.Op("<-").Chan().Add(e.typ(t.Elem()))
		}
		elem := e.typ(t.Elem())
		if c, ok := t.Elem().(*types.Chan); ok && c.Dir() == types.RecvOnly {
			elem = jen.Parens(elem)
		}
		return jen.Chan().Add(elem)
	case *types.Signature:
		return jen.Func().Add(e.signature(t, nil))
	case *types.Struct:
		var fields []jen.Code
		for i := range t.NumFields() {
			f := t.Field(i)
			var st *jen.Statement
			if f.Embedded() {
				st = e.typ(f.Type())
			} else {
				st = jen.Id(f.Name()).Add(e.typ(f.Type()))
			}
			if tag := t.Tag(i); tag != "" {
				st = st.Op(strconv.Quote(tag))
			}
			fields = append(fields, st)
		}
		return jen.Struct(fields...)
	case *types.Interface:
		var ms []jen.Code
		for i := range t.NumEmbeddeds() {
			ms = append(ms, e.typ(t.EmbeddedType(i)))
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			ms = append(ms, jen.Id(m.Name()).Add(e.signature(m.Type().(*types.Signature), nil)))
		}
		return jen.Interface(ms...)
	case *types.Union:
		var terms []jen.Code
		for i := range t.Len() {
			tt := t.Term(i)
			st := e.typ(tt.Type())
			if tt.Tilde() {
				st = jen.Op("~").Add(st)
			}
			terms = append(terms, st)
		}
		return jen.Union(terms...)
	}
	panic(fmt.Sprintf("idemgen: unexpected type %T", t))
}

// signature renders (params) (results); names, when set, name the params.
func (e *emitter) signature(sig *types.Signature, names []string) *jen.Statement {
	params := sig.Params()
	var ps []jen.Code
	for i := range params.Len() {
		t := params.At(i).Type()
		var st *jen.Statement
		if sig.Variadic() && i == params.Len()-1 {
			st = jen.Op("...").Add(e.typ(t.(*types.Slice).Elem()))
		} else {
			st = e.typ(t)
		}
		if names != nil {
			st = jen.Id(names[i]).Add(st)
		}
		ps = append(ps, st)
	}
	var rs []jen.Code
	for i := range sig.Results().Len() {
		rs = append(rs, e.typ(sig.Results().At(i).Type()))
	}
	out := jen.Params(ps...)
	switch len(rs) {
	case 0:
	case 1:
		out = out.Add(rs[0])
	default:
		out = out.Params(rs...)
	}
	return out
}

func (e *emitter) file() {
	s := e.s
	e.f.Var().Id("_").Id(s.Name).Op("=").Parens(jen.Op("*").Id(s.Wrapper)).Parens(jen.Nil())
	e.f.Line()

	e.f.Commentf("%s makes the ops of %s idempotent on the idem runtime.", s.Wrapper, s.Name)
	e.f.Type().Id(s.Wrapper).StructFunc(func(g *jen.Group) {
		g.Id(e.innerField).Id(s.Name)
		g.Id(e.rtField).Op("*").Add(e.idem("Runtime"))
		if len(e.funcOrder) > 0 {
			g.Line()
			g.Comment(fmt.Sprintf("Method values of %s, made once: one made per call is allocated.", e.innerField))
		}
		for _, name := range e.funcOrder {
			g.Id(e.funcFields[name]).Func().Add(e.signature(e.method(name).Sig, nil))
		}
	})
	e.f.Line()
	e.constructor()
	for _, m := range s.Methods {
		e.f.Line()
		if m.Skip {
			e.skip(m)
		} else {
			e.op(m)
		}
	}
}

func (e *emitter) constructor() {
	s := e.s
	n := e.names.clone()
	inner, rt := n.fresh("inner"), n.fresh("rt")
	var ops, skips []string
	for _, m := range s.Methods {
		if m.Skip {
			skips = append(skips, m.Name)
		} else {
			ops = append(ops, m.Name)
		}
	}
	intro := fmt.Sprintf("%s returns a %s that runs %s of %s at most once per idempotency key on %s, and replays the recorded outcome to duplicates.", s.Constructor, s.Name, list(ops), inner, rt)
	if len(skips) > 0 {
		intro += fmt.Sprintf(" %s %s passed straight through.", list(skips), plural(len(skips), "is", "are"))
	}
	e.comment(intro)
	var regs []*Method
	for _, m := range s.Methods {
		if !m.Skip && m.Reconcile != "" {
			regs = append(regs, m)
		}
	}
	if len(regs) > 0 {
		e.f.Comment("")
		e.comment("It registers the reconcile queries with the runtime by operation name, so that a reconciler can converge records whose outcome is unknown:")
		for _, m := range regs {
			e.f.Commentf("  - %q: %s.%s", m.Op, s.Name, m.Reconcile)
		}
	}
	e.f.Comment("")
	e.comment(fmt.Sprintf("It panics when %s or %s is nil.", inner, rt))
	e.f.Func().Id(s.Constructor).Params(jen.Id(inner).Id(s.Name), jen.Id(rt).Op("*").Add(e.idem("Runtime"))).Id(s.Name).BlockFunc(func(g *jen.Group) {
		g.If(jen.Id(inner).Op("==").Nil().Op("||").Id(rt).Op("==").Nil()).Block(
			jen.Panic(jen.Lit(fmt.Sprintf("idem: %s: inner and rt must not be nil", s.Constructor))),
		)
		if len(regs) > 0 {
			errName := n.fresh("err")
			for _, m := range regs {
				g.If(
					jen.Id(errName).Op(":=").Add(e.idem("Register")).Types(e.typ(m.Req), e.typ(m.Resp)).Call(
						jen.Id(rt), jen.Lit(m.Op), jen.Id(inner).Dot(m.Reconcile), e.queryOptions(m),
					),
					jen.Id(errName).Op("!=").Nil(),
				).Block(jen.Panic(jen.Id(errName)))
			}
		}
		items := []jen.Code{jen.Id(e.innerField).Op(":").Id(inner), jen.Id(e.rtField).Op(":").Id(rt)}
		for _, name := range e.funcOrder {
			items = append(items, jen.Id(e.funcFields[name]).Op(":").Id(inner).Dot(name))
		}
		g.Return(jen.Op("&").Id(s.Wrapper).Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, items...))
	})
}

func list(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// paramNames names the parameters of m in the wrapper: the source's names
// where they clash with nothing the body refers to, fresh ones otherwise.
func (e *emitter) paramNames(m *Method, n namer) []string {
	params := m.Sig.Params()
	names := make([]string, params.Len())
	for i := range params.Len() {
		if nm := params.At(i).Name(); n.free(nm) {
			names[i] = nm
			n[nm] = true
		}
	}
	for i := range params.Len() {
		if names[i] != "" {
			continue
		}
		base := "p" + strconv.Itoa(i)
		switch {
		case i == 0 && isContext(params.At(i).Type()):
			base = "ctx"
		case isPgxTx(params.At(i).Type()):
			base = "tx"
		case !m.Skip && i == m.ReqIndex:
			base = "req"
		}
		names[i] = n.fresh(base)
	}
	return names
}

func (e *emitter) skip(m *Method) {
	n := e.names.clone()
	names := e.paramNames(m, n)
	recv := n.fresh("w")
	var args []jen.Code
	for i, nm := range names {
		a := jen.Id(nm)
		if m.Sig.Variadic() && i == len(names)-1 {
			a = a.Op("...")
		}
		args = append(args, a)
	}
	call := jen.Id(recv).Dot(e.innerField).Dot(m.Name).Call(args...)
	e.f.Commentf("%s passes straight through to the wrapped %s (//idem:skip).", m.Name, e.s.Name)
	e.f.Func().Params(jen.Id(recv).Op("*").Id(e.s.Wrapper)).Id(m.Name).Add(e.signature(m.Sig, names)).BlockFunc(func(g *jen.Group) {
		if m.Sig.Results().Len() == 0 {
			g.Add(call)
		} else {
			g.Return(call)
		}
	})
}

// guard is a nil check on the way to a path's value.
type guard struct {
	expr []string // root parameter index as "", then field names
	text string   // the path prefix as written in the directive
	key  bool     // on the way to the key or scope: ErrInvalidKey
}

// guards lists the nil checks that m's paths need, in order, without
// duplicates.
func (e *emitter) guards(m *Method) []guard {
	var out []guard
	seen := map[string]bool{}
	add := func(p *Path, key bool) {
		if p == nil {
			return
		}
		root := m.Sig.Params().At(p.Param)
		written := strings.SplitN(p.Text, ".", 2)[0]
		t := root.Type()
		sel := []string{}
		for i := 0; i <= len(p.Steps); i++ {
			if i == len(p.Steps) {
				break // the value itself may be a nil pointer: it is only read
			}
			if isPointer(t) {
				k := strings.Join(sel, ".")
				if !seen[k] {
					seen[k] = true
					out = append(out, guard{expr: slices.Clone(sel), text: strings.Join(append([]string{written}, sel...), "."), key: key})
				}
			}
			sel = append(sel, p.Steps[i].Field)
			t = p.Steps[i].Type
		}
	}
	add(m.Key, true)
	add(m.Scope, true)
	for _, p := range m.Fingerprint {
		add(p, false)
	}
	return out
}

// pathExpr renders a path rooted at the named parameter.
func pathExpr(root string, fields []string) *jen.Statement {
	s := jen.Id(root)
	for _, f := range fields {
		s = s.Dot(f)
	}
	return s
}

func fields(p *Path) []string {
	out := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		out[i] = s.Field
	}
	return out
}

func (e *emitter) stringExpr(p *Path, names []string) *jen.Statement {
	x := pathExpr(names[p.Param], fields(p))
	if types.Identical(p.Type, types.Typ[types.String]) {
		return x
	}
	return jen.String().Parens(x)
}

func printfEscape(s string) string { return strings.ReplaceAll(s, "%", "%%") }

func (e *emitter) op(m *Method) {
	s := e.s
	n := e.names.clone()
	names := e.paramNames(m, n)
	recv := n.fresh("w")
	ctx, req := names[0], names[m.ReqIndex]
	guards := e.guards(m)
	needZero := len(guards) > 0 || len(m.Fingerprint) > 0 || m.Scope != nil
	var zero, fp, errName string
	if needZero {
		zero = n.fresh("zero")
	}
	if len(m.Fingerprint) > 0 {
		fp, errName = n.fresh("fp"), n.fresh("err")
	}

	var doc []string
	doc = append(doc, fmt.Sprintf("%s runs %s of the wrapped %s at most once per idempotency key %s (operation %q, %s effect", m.Name, m.Name, s.Name, m.Key.Text, m.Op, m.Effect))
	if m.Lease > 0 {
		doc = append(doc, ", lease "+fmtDuration(m.Lease))
	}
	if m.TTL > 0 {
		doc = append(doc, ", records kept "+fmtDuration(m.TTL))
	}
	doc = append(doc, ")")
	if m.Scope != nil {
		doc = append(doc, fmt.Sprintf(", in the scope %s", m.Scope.Text))
	}
	doc = append(doc, ".")
	if m.Reconcile != "" {
		doc = append(doc, fmt.Sprintf(" %s tells whether an attempt whose outcome is unknown took effect.", m.Reconcile))
	}
	if len(m.Fingerprint) > 0 {
		var ts []string
		for _, p := range m.Fingerprint {
			ts = append(ts, p.Text)
		}
		doc = append(doc, fmt.Sprintf(" A key reused with other values of %s is rejected.", list(ts)))
	}
	e.comment(strings.Join(doc, ""))

	e.f.Func().Params(jen.Id(recv).Op("*").Id(s.Wrapper)).Id(m.Name).Add(e.signature(m.Sig, names)).BlockFunc(func(g *jen.Group) {
		if needZero {
			g.Var().Id(zero).Add(e.typ(m.Resp))
		}
		for _, gd := range guards {
			var errv *jen.Statement
			if gd.key {
				errv = jen.Qual("fmt", "Errorf").Call(jen.Lit("%w: "+printfEscape(fmt.Sprintf("%s: %s is nil", m.Op, gd.text))), e.idem("ErrInvalidKey"))
			} else {
				errv = jen.Qual("errors", "New").Call(jen.Lit(fmt.Sprintf("idem: %s: fingerprint: %s is nil", m.Op, gd.text)))
			}
			g.If(pathExpr(names[m.ReqIndex], gd.expr).Op("==").Nil()).Block(jen.Return(jen.Id(zero), errv))
		}
		if len(m.Fingerprint) > 0 {
			// Each field by address: json calls a MarshalJSON or
			// MarshalText with a pointer receiver on an addressable value
			// only, and the analysis checked the fields' pointer method sets.
			var vals []jen.Code
			for _, p := range m.Fingerprint {
				vals = append(vals, jen.Op("&").Add(pathExpr(names[p.Param], fields(p))))
			}
			g.List(jen.Id(fp), jen.Id(errName)).Op(":=").Id(recv).Dot(e.rtField).Dot("FingerprintOf").Call(jen.Index().Add(e.emptyInterface()).Values(vals...))
			g.If(jen.Id(errName).Op("!=").Nil()).Block(jen.Return(jen.Id(zero),
				jen.Qual("fmt", "Errorf").Call(jen.Lit(printfEscape("idem: "+m.Op+": encoding the fingerprint fields: ")+"%w"), jen.Id(errName))))
		}
		if m.Scope != nil {
			// An empty scope would put the key in the unscoped namespace,
			// shared by every caller that forgot the field.
			g.If(pathExpr(names[m.Scope.Param], fields(m.Scope)).Op("==").Lit("")).Block(jen.Return(jen.Id(zero),
				jen.Qual("fmt", "Errorf").Call(jen.Lit("%w: "+printfEscape(fmt.Sprintf("%s: the scope %s is empty", m.Op, m.Scope.Text))), e.idem("ErrInvalidKey"))))
			if m.Effect == Local {
				g.Id(ctx).Op("=").Add(e.idem("WithScope")).Call(jen.Id(ctx), e.stringExpr(m.Scope, names))
			}
		}
		items := []jen.Code{
			jen.Id("Operation").Op(":").Lit(m.Op),
			jen.Id("Key").Op(":").Add(e.stringExpr(m.Key, names)),
		}
		if m.Scope != nil && m.Effect != Local {
			// Call.Scope: the effect's context carries it, and the call
			// makes no context for it.
			items = append(items, jen.Id("Scope").Op(":").Add(e.stringExpr(m.Scope, names)))
		}
		items = append(items, jen.Id("Request").Op(":").Id(req))
		if f := e.funcFields[m.Name]; f != "" {
			items = append(items, jen.Id("Effect").Op(":").Id(recv).Dot(f))
		} else {
			items = append(items, jen.Id("Effect").Op(":").Id(recv).Dot(e.innerField).Dot(m.Name))
		}
		if m.Reconcile != "" {
			if f := e.funcFields[m.Reconcile]; f != "" {
				items = append(items, jen.Id("Query").Op(":").Id(recv).Dot(f))
			} else {
				items = append(items, jen.Id("Query").Op(":").Id(recv).Dot(e.innerField).Dot(m.Reconcile))
			}
		}
		if len(m.Fingerprint) > 0 {
			items = append(items, jen.Id("Fingerprint").Op(":").Id(fp))
		}
		if m.Lease > 0 {
			items = append(items, jen.Id("Lease").Op(":").Add(durationExpr(m.Lease)))
		}
		if m.TTL > 0 {
			items = append(items, jen.Id("TTL").Op(":").Add(durationExpr(m.TTL)))
		}
		lit := jen.Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, items...)
		if m.Effect == Local {
			g.Return(jen.Qual(PgstorePath, "DoTx").Call(jen.Id(ctx), jen.Id(recv).Dot(e.rtField), jen.Id(names[m.TxIndex]),
				jen.Qual(PgstorePath, "TxCall").Types(e.typ(m.Req), e.typ(m.Resp)).Add(lit)))
			return
		}
		g.Return(e.idem("Do").Call(jen.Id(ctx), jen.Id(recv).Dot(e.rtField),
			e.idem("Call").Types(e.typ(m.Req), e.typ(m.Resp)).Add(lit)))
	})
}

// durationExpr renders d readably: 30 * time.Second, 24 * time.Hour.
func durationExpr(d time.Duration) *jen.Statement {
	units := []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"}}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return jen.Qual("time", u.name)
			}
			return jen.Lit(int(d/u.d)).Op("*").Qual("time", u.name)
		}
	}
	return jen.Qual("time", "Duration").Call(jen.Op(strconv.FormatInt(int64(d), 10)))
}

// comment writes text as a line comment wrapped at 80 columns.
func (e *emitter) comment(text string) {
	const width = 77
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			e.f.Comment(line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		e.f.Comment(line)
	}
}

// fmtDuration writes d without zero units: 24h, 1h30m, 30s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// groupImports puts the standard library's imports of a gofmt-clean file in
// a group of their own, before the others, as goimports does. jennifer
// writes one sorted block; splitting a sorted block into two sorted groups
// keeps the file gofmt-clean.
func groupImports(src []byte) []byte {
	const open, closing = "\nimport (\n", "\n)\n"
	i := bytes.Index(src, []byte(open))
	if i < 0 {
		return src
	}
	start := i + len(open)
	n := bytes.Index(src[start:], []byte(closing))
	if n < 0 {
		return src
	}
	var std, other []string
	for _, line := range strings.Split(string(src[start:start+n]), "\n") {
		q := strings.IndexByte(line, '"')
		if q < 0 {
			return src // not a plain import line: leave the block alone
		}
		first, _, _ := strings.Cut(strings.Trim(line[q:], `"`), "/")
		if strings.Contains(first, ".") {
			other = append(other, line)
		} else {
			std = append(std, line)
		}
	}
	if len(std) == 0 || len(other) == 0 {
		return src
	}
	block := strings.Join(std, "\n") + "\n\n" + strings.Join(other, "\n")
	out := append([]byte{}, src[:start]...)
	out = append(out, block...)
	return append(out, src[start+n:]...)
}

// queryOptions is the runtime.QueryOptions literal registered with m's
// reconcile query: the reconciler keeps what it converges for m's TTL.
func (e *emitter) queryOptions(m *Method) *jen.Statement {
	if m.TTL > 0 {
		return e.idem("QueryOptions").Values(jen.Dict{jen.Id("TTL"): durationExpr(m.TTL)})
	}
	return e.idem("QueryOptions").Values()
}

// method returns the service's method called name.
func (e *emitter) method(name string) *Method {
	for _, m := range e.s.Methods {
		if m.Name == name {
			return m
		}
	}
	panic("idemgen: no method " + name) // the analysis checked every name
}

// lowerFirst returns name with its first letter lower-cased, for an
// unexported field named after an exported method (not a keyword: Type
// gives typeFunc).
func lowerFirst(name string) string {
	r, n := utf8.DecodeRuneInString(name)
	s := string(unicode.ToLower(r)) + name[n:]
	if token.IsKeyword(s) {
		s += "Func"
	}
	return s
}

// emptyInterface is the empty interface as the generated file can name it:
// any, unless the package declares its own.
func (e *emitter) emptyInterface() *jen.Statement {
	if e.anyTaken {
		return jen.Interface()
	}
	return jen.Any()
}
