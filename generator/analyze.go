package generator

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/tools/go/packages"
)

// Options of each directive.
var (
	serviceOptions = []string{"file"}
	opOptions      = []string{"effect", "fingerprint", "key", "lease", "op", "reconcile", "scope", "ttl"}
)

// minLease is the shortest lease the runtime accepts (see runtime.WithLease).
const minLease = 10 * time.Millisecond

// maxOperationLen is the longest operation name the runtime accepts.
const maxOperationLen = 255

// analyzer checks one package.
type analyzer struct {
	errs
	pkg      *packages.Package
	dir      string
	services []*Service
	seen     map[*ast.Comment]bool // directives consumed
	ops      map[string]*Method    // operation name -> op

	undefined []packages.Error // "undefined: X" type errors
}

// Analyze finds the //idem:service interfaces of pkg and checks them and
// their directives. It returns every problem, sorted by position.
func Analyze(pkg *packages.Package) ([]*Service, ErrorList) {
	a := &analyzer{
		errs: errs{fset: pkg.Fset},
		pkg:  pkg,
		seen: make(map[*ast.Comment]bool),
		ops:  make(map[string]*Method),
	}
	a.packageErrors()
	if len(pkg.Syntax) == 0 || pkg.Types == nil || a.broken() {
		return nil, a.list.sorted()
	}
	a.dir = filepath.Dir(pkg.Fset.File(pkg.Syntax[0].Pos()).Name())
	for _, f := range pkg.Syntax {
		a.file(f)
	}
	a.outputs()
	a.reportUndefined()
	if len(a.list) > 0 {
		return nil, a.list.sorted()
	}
	return a.services, nil
}

// packageErrors reports the errors of loading pkg. Type errors about the
// constructors idemgen generates are expected (the generated files are left
// out of loading) and ignored.
func (a *analyzer) packageErrors() {
	// With syntax errors the rest is noise: report the first parse error
	// of each file (later ones are mostly its echo) and stop there.
	parseErrs := map[string]bool{}
	for _, e := range a.pkg.Errors {
		if e.Kind != packages.ParseError {
			continue
		}
		pos := parsePos(e.Pos)
		if !parseErrs[pos.Filename] {
			parseErrs[pos.Filename] = true
			a.list = append(a.list, Error{Pos: pos, Msg: e.Msg})
		}
	}
	for _, e := range a.pkg.Errors {
		switch {
		case e.Kind == packages.ParseError:
		case len(parseErrs) > 0 && e.Kind == packages.TypeError:
		case e.Kind == packages.ListError && e.Pos == "" && strings.HasPrefix(e.Msg, "# "):
			// The go command's compiler output for the package itself;
			// the type checker reports the same errors with positions.
		case e.Kind == packages.TypeError && strings.HasPrefix(e.Msg, "undefined: "):
			// Maybe a generated constructor, left out of loading: decided
			// once the services are known (see undefined).
			a.undefined = append(a.undefined, e)
		default:
			a.list = append(a.list, Error{Pos: parsePos(e.Pos), Msg: e.Msg})
		}
	}
}

// reportUndefined reports the "undefined:" type errors, except those about
// the constructors of the package's services: code that calls them is
// expected to fail to type-check while the generated files are left out.
func (a *analyzer) reportUndefined() {
	generated := map[string]bool{}
	for _, s := range a.services {
		generated[s.Constructor] = true
	}
	for _, e := range a.undefined {
		if !generated[strings.TrimPrefix(e.Msg, "undefined: ")] {
			a.list = append(a.list, Error{Pos: parsePos(e.Pos), Msg: e.Msg})
		}
	}
}

// broken reports whether the package has syntax errors.
func (a *analyzer) broken() bool {
	for _, e := range a.pkg.Errors {
		if e.Kind == packages.ParseError {
			return true
		}
	}
	return false
}

// parsePos parses "file:line:col" or "file:line" as go/packages reports it.
func parsePos(s string) token.Position {
	var p token.Position
	rest := s
	nums := []int{}
	for range 2 {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			break
		}
		n, err := strconv.Atoi(rest[i+1:])
		if err != nil {
			break
		}
		nums = append([]int{n}, nums...)
		rest = rest[:i]
	}
	if len(nums) == 0 {
		return p
	}
	p.Filename, p.Line = rest, nums[0]
	if len(nums) > 1 {
		p.Column = nums[1]
	}
	return p
}

func (a *analyzer) file(f *ast.File) {
	var all []*ast.Comment
	for _, g := range f.Comments {
		for _, c := range g.List {
			if isDirective(c) {
				all = append(all, c)
			}
		}
	}
	if len(all) == 0 {
		return
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			doc := ts.Doc
			if doc == nil && gd.Lparen == token.NoPos {
				doc = gd.Doc
			}
			var svc []*directive
			for _, d := range directivesIn(doc) {
				if d.name == directiveService {
					svc = append(svc, d)
					a.seen[d.comment] = true
				}
			}
			if len(svc) == 0 {
				continue
			}
			for _, d := range svc[1:] {
				a.at(d.comment.Slash, "duplicate //idem:service directive on %s", ts.Name.Name)
			}
			a.service(f, ts, svc[0])
		}
	}
	for _, c := range all {
		if a.seen[c] {
			continue
		}
		d := parseDirective(c)
		switch d.name {
		case directiveService:
			a.at(c.Slash, "//idem:service must be in the doc comment of a package-level interface type declaration")
		case directiveOp, directiveSkip:
			a.at(c.Slash, "%s must be in the doc comment of a method of an //idem:service interface", d)
		default:
			a.at(c.Slash, "unknown directive %s (want //idem:service, //idem:op or //idem:skip)", d)
		}
	}
}

// checkOptions reports malformed, unknown and repeated options of d and
// returns the valid ones by name.
func (a *analyzer) checkOptions(d *directive, known []string) map[string]option {
	out := make(map[string]option)
	for _, o := range d.opts {
		switch {
		case !o.hasEq:
			a.at(o.pos, "malformed option %q in %s: want name=value", o.raw, d)
		case !slices.Contains(known, o.name):
			if len(known) == 0 {
				a.at(o.pos, "%s takes no options, got %q", d, o.raw)
			} else {
				a.at(o.pos, "unknown option %q in %s (known: %s)", o.name+"=", d, strings.Join(known, "=, ")+"=")
			}
		case o.value == "":
			a.at(o.pos, "option %s= in %s has no value", o.name, d)
		default:
			if _, dup := out[o.name]; dup {
				a.at(o.pos, "option %s= is given twice in %s", o.name, d)
				continue
			}
			out[o.name] = o
		}
	}
	return out
}

func (a *analyzer) service(f *ast.File, ts *ast.TypeSpec, d *directive) {
	name := ts.Name.Name
	opts := a.checkOptions(d, serviceOptions)
	it, ok := ts.Type.(*ast.InterfaceType)
	if !ok {
		a.at(d.comment.Slash, "//idem:service must annotate an interface type; %s is %s", name, describeTypeExpr(ts.Type))
		a.consumeNested(ts.Type)
		return
	}
	if ts.TypeParams != nil {
		a.at(ts.Name.Pos(), "//idem:service interface %s has type parameters; generic services are not supported", name)
		a.consumeNested(ts.Type)
		return
	}
	s := &Service{
		Name: name, Pos: ts.Name.Pos(), Pkg: a.pkg.Types, Dir: a.dir,
		File:  snakeCase(name) + "_idem.go",
		Build: constraintText(sourceConstraint(a.pkg.Fset, f)),
	}
	if o, ok := opts["file"]; ok {
		if strings.ContainsAny(o.value, `/\`) || !strings.HasSuffix(o.value, ".go") || strings.HasSuffix(o.value, "_test.go") || o.value == ".go" {
			a.at(o.pos, "file=%s: want a file name in the package directory ending in .go (not _test.go)", o.value)
		}
		s.File = o.value
		switch x := nameConstraint(s.File); {
		case strings.HasPrefix(s.File, "_") || strings.HasPrefix(s.File, "."):
			a.at(o.pos, "file=%s: the go command ignores files whose names start with %q; want another name", o.value, s.File[:1])
		case x != nil:
			a.at(o.pos, "file=%s: the go command builds that file only for %s; want a name with no GOOS or GOARCH suffix", o.value, x)
		}
	} else if strings.HasPrefix(s.File, "_") {
		a.at(s.Pos, "%s: the go command ignores files whose names start with \"_\"; set //idem:service file=", s.File)
	}
	if ast.IsExported(name) {
		s.Constructor = "NewIdempotent" + name
	} else {
		r, n := utf8.DecodeRuneInString(name)
		s.Constructor = "newIdempotent" + string(unicode.ToUpper(r)) + name[n:]
	}
	if obj := a.pkg.Types.Scope().Lookup(s.Constructor); obj != nil {
		a.at(d.comment.Slash, "%s is already declared at %s; idemgen generates it for %s", s.Constructor, a.short(obj.Pos()), name)
	}

	var withDirective []*ast.Field
	for _, f := range it.Methods.List {
		for _, dd := range directivesIn(f.Doc) {
			a.seen[dd.comment] = true
		}
		for _, dd := range directivesIn(f.Comment) {
			a.seen[dd.comment] = true
			a.at(dd.comment.Slash, "%s must be in the doc comment of the method (the line above it), not after it", dd)
		}
		if len(f.Names) == 0 {
			a.at(f.Type.Pos(), "%s embeds %s; embedded interfaces are not supported in an //idem:service interface: list its methods and annotate each", name, types.ExprString(f.Type))
			continue
		}
		withDirective = append(withDirective, f)
	}
	var byName = make(map[string]*Method)
	for _, f := range withDirective {
		m := a.methodDirectives(s, f)
		if m != nil {
			s.Methods = append(s.Methods, m)
			byName[m.Name] = m
		}
	}
	ops := 0
	for _, m := range s.Methods {
		if !m.Skip {
			ops++
			a.checkReconcile(s, m, byName)
		}
	}
	if ops == 0 && len(s.Methods) == len(withDirective) {
		a.at(ts.Name.Pos(), "//idem:service %s has no //idem:op method", name)
	}
	a.services = append(a.services, s)
}

// consumeNested marks directives inside a type expression as seen (an error
// was reported for the enclosing declaration already).
func (a *analyzer) consumeNested(e ast.Expr) {
	ast.Inspect(e, func(n ast.Node) bool {
		if g, ok := n.(*ast.CommentGroup); ok {
			for _, c := range g.List {
				a.seen[c] = true
			}
		}
		if f, ok := n.(*ast.Field); ok {
			for _, g := range []*ast.CommentGroup{f.Doc, f.Comment} {
				if g != nil {
					for _, c := range g.List {
						a.seen[c] = true
					}
				}
			}
		}
		return true
	})
}

func describeTypeExpr(e ast.Expr) string {
	switch e.(type) {
	case *ast.StructType:
		return "a struct type"
	case *ast.FuncType:
		return "a function type"
	case *ast.MapType:
		return "a map type"
	case *ast.ArrayType:
		return "a slice or array type"
	case *ast.ChanType:
		return "a channel type"
	}
	return "not an interface literal (" + types.ExprString(e) + ")"
}

// methodDirectives reads the directives of one interface method and checks
// the method against them. It returns nil when there is nothing to build on.
func (a *analyzer) methodDirectives(s *Service, f *ast.Field) *Method {
	ident := f.Names[0]
	fn, ok := a.pkg.TypesInfo.Defs[ident].(*types.Func)
	if !ok {
		return nil
	}
	sig := fn.Type().(*types.Signature)
	m := &Method{Name: ident.Name, Pos: ident.Pos(), Sig: sig, TxIndex: -1}
	var ds []*directive
	for _, d := range directivesIn(f.Doc) {
		if d.name == directiveOp || d.name == directiveSkip {
			ds = append(ds, d)
		} else if d.name == directiveService {
			a.at(d.comment.Slash, "//idem:service must annotate an interface type, not a method")
		} else {
			a.at(d.comment.Slash, "unknown directive %s (want //idem:op or //idem:skip on a method)", d)
		}
	}
	if len(ds) == 0 {
		hint := ""
		if f.Doc != nil {
			for _, c := range f.Doc.List {
				if strings.HasPrefix(c.Text, "// idem:") {
					hint = " (directives take no space: write //idem:, not // idem:)"
				}
			}
		}
		a.at(ident.Pos(), "method %s of //idem:service %s has no //idem:op or //idem:skip directive%s", m.Name, s.Name, hint)
		return nil
	}
	for _, d := range ds[1:] {
		a.at(d.comment.Slash, "method %s has more than one directive (%s and %s); give it one", m.Name, ds[0], d)
	}
	d := ds[0]
	if d.name == directiveSkip {
		a.checkOptions(d, nil)
		m.Skip = true
		return m
	}
	m.dirPos = d.comment.Slash
	opts := a.checkOptions(d, opOptions)
	a.checkOp(s, m, d, opts)
	return m
}

// qualifier writes types of the package being generated unqualified.
func (a *analyzer) qualifier(p *types.Package) string {
	if p == a.pkg.Types {
		return ""
	}
	return p.Name()
}

func (a *analyzer) typeString(t types.Type) string { return types.TypeString(t, a.qualifier) }

func (a *analyzer) short(pos token.Pos) string {
	p := a.fset.Position(pos)
	if rel, err := filepath.Rel(a.dir, p.Filename); err == nil && !strings.HasPrefix(rel, "..") {
		p.Filename = rel
	}
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return false
	}
	return n.Obj().Pkg().Path() == path && n.Obj().Name() == name
}

func isContext(t types.Type) bool { return isNamed(t, "context", "Context") }
func isPgxTx(t types.Type) bool   { return isNamed(t, pgxPath, "Tx") }
func isOutcome(t types.Type) bool { return isNamed(t, RuntimePath, "Outcome") }

var errorType = types.Universe.Lookup("error").Type()

func isError(t types.Type) bool { return types.Identical(t, errorType) }

func isInvalid(t types.Type) bool { return t == types.Typ[types.Invalid] }

func isStringLike(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsString != 0
}

func paramPos(v *types.Var, fallback token.Pos) token.Pos {
	if v.Pos().IsValid() {
		return v.Pos()
	}
	return fallback
}

// checkOp checks the shape of an op method and its options.
func (a *analyzer) checkOp(s *Service, m *Method, d *directive, opts map[string]option) {
	sig := m.Sig
	params, results := sig.Params(), sig.Results()
	m.Op = s.Name + "." + m.Name
	m.service = s.Name
	if o, ok := opts["op"]; ok {
		m.Op = o.value
		if len(o.value) > maxOperationLen {
			a.at(o.pos, "op=: the operation name is %d bytes; the limit is %d", len(o.value), maxOperationLen)
		}
	}
	opPos := m.dirPos
	if o, ok := opts["op"]; ok {
		opPos = o.pos
	}
	if prev, dup := a.ops[m.Op]; dup {
		a.at(opPos, "operation %q of %s.%s is already used by %s.%s at %s; set op= to tell them apart", m.Op, s.Name, m.Name, prev.service, prev.Name, a.short(prev.Pos))
	} else {
		a.ops[m.Op] = m
	}

	if o, ok := opts["effect"]; ok {
		switch o.value {
		case "remote":
			m.Effect = Remote
		case "local":
			m.Effect = Local
		default:
			a.at(o.pos, "effect=%s: want effect=remote or effect=local", o.value)
		}
	}

	shapeOK := true
	if sig.Variadic() {
		a.at(m.Pos, "op method %s is variadic; ops take (ctx context.Context, req Req)", m.Name)
		shapeOK = false
	}
	if params.Len() == 0 || !isContext(params.At(0).Type()) {
		if params.Len() == 0 {
			a.at(m.Pos, "op method %s has no parameters; its first parameter must be context.Context", m.Name)
		} else if !isInvalid(params.At(0).Type()) {
			a.at(paramPos(params.At(0), m.Pos), "first parameter of op method %s must be context.Context, not %s", m.Name, a.typeString(params.At(0).Type()))
		}
		shapeOK = false
	}
	if results.Len() == 0 || !isError(results.At(results.Len()-1).Type()) {
		a.at(m.Pos, "last result of op method %s must be error", m.Name)
		shapeOK = false
	} else if results.Len() == 1 {
		a.at(m.Pos, "op method %s returns only an error; an op returns (Resp, error), and the response is what duplicates get replayed", m.Name)
		shapeOK = false
	} else if results.Len() != 2 {
		a.at(m.Pos, "op method %s returns %d values besides the error; an op returns exactly one, (Resp, error)", m.Name, results.Len()-1)
		shapeOK = false
	} else if resp := results.At(0).Type(); interfaceResponse(resp) && !isInvalid(resp) {
		// The stored response is decoded into a new Resp for a duplicate:
		// into an interface it fails (the duplicate gets
		// ErrNotReplayable), or, for the empty interface, gives maps and
		// float64s where the first caller got the handler's types
		// (review r55).
		what := "the interface " + a.typeString(resp)
		if !types.IsInterface(resp) {
			what = a.typeString(resp) + ", a pointer to an interface"
		}
		a.at(paramPos(results.At(0), m.Pos), "op method %s returns %s: a duplicate's replay cannot decode the stored response into it; return a concrete type", m.Name, what)
		shapeOK = false
	}
	txIdx := -1
	for i := range params.Len() {
		if isPgxTx(params.At(i).Type()) {
			txIdx = i
			break
		}
	}
	switch m.Effect {
	case Remote:
		if txIdx >= 0 {
			a.at(paramPos(params.At(txIdx), m.Pos), "op method %s takes a pgx.Tx but is effect=remote: a remote effect runs with no transaction open (use effect=local for writes to the same database)", m.Name)
			shapeOK = false
		} else if params.Len() != 2 && params.Len() > 0 && isContext(params.At(0).Type()) {
			a.at(m.Pos, "op method %s must take (ctx context.Context, req Req) for effect=remote; it takes %d parameters", m.Name, params.Len())
			shapeOK = false
		}
		m.ReqIndex = 1
	case Local:
		if params.Len() < 2 || !isPgxTx(params.At(1).Type()) || params.Len() != 3 {
			a.at(m.Pos, "op method %s must take (ctx context.Context, tx pgx.Tx, req Req) for effect=local", m.Name)
			shapeOK = false
		}
		m.TxIndex, m.ReqIndex = 1, 2
		for _, name := range []string{"lease", "reconcile"} {
			if o, ok := opts[name]; ok {
				a.at(o.pos, "%s= does not apply to effect=local: the effect commits with its record in one transaction, so there is no lease and nothing to reconcile", name)
			}
		}
	}
	if shapeOK {
		m.Req = params.At(m.ReqIndex).Type()
		m.Resp = results.At(0).Type()
	}

	if o, ok := opts["key"]; ok {
		if p := a.path(m, "key", o.value, o.pos); p != nil {
			if !isStringLike(p.Type) {
				a.at(o.pos, "key=%s has type %s; the key must be a string (or have a string underlying type)", o.value, a.typeString(p.Type))
			}
			m.Key = p
		}
	} else {
		a.at(d.comment.Slash, "//idem:op on %s has no key= option; name the field that holds the idempotency key, like key=req.IdempotencyKey", m.Name)
	}
	if o, ok := opts["scope"]; ok && o.value != "ctx" {
		if p := a.path(m, "scope", o.value, o.pos); p != nil {
			if !isStringLike(p.Type) {
				a.at(o.pos, "scope=%s has type %s; the scope must be a string (or have a string underlying type)", o.value, a.typeString(p.Type))
			}
			m.Scope = p
		}
	}
	if o, ok := opts["fingerprint"]; ok {
		seen := map[string]bool{}
		for _, part := range strings.Split(o.value, ",") {
			if part == "" {
				a.at(o.pos, "fingerprint=%s has an empty field path", o.value)
				continue
			}
			if seen[part] {
				a.at(o.pos, "fingerprint=%s names %s twice", o.value, part)
				continue
			}
			seen[part] = true
			p := a.path(m, "fingerprint", part, o.pos)
			if p == nil {
				continue
			}
			if why := jsonProblem(p.Type, a.pkg.Types, map[types.Type]bool{}); why != "" {
				a.at(o.pos, "fingerprint field %s cannot be encoded as JSON: %s", part, why)
			}
			m.Fingerprint = append(m.Fingerprint, p)
		}
	}
	if o, ok := opts["lease"]; ok && m.Effect == Remote {
		m.Lease = a.duration(o)
		if m.Lease > 0 && m.Lease < minLease {
			a.at(o.pos, "lease=%s is shorter than the runtime's minimum of %v", o.value, minLease)
		}
	}
	if o, ok := opts["ttl"]; ok {
		m.TTL = a.duration(o)
	}
	if o, ok := opts["reconcile"]; ok && m.Effect == Remote {
		m.Reconcile = o.value
		m.dirPos = o.pos
	}
}

func (a *analyzer) duration(o option) time.Duration {
	d, err := time.ParseDuration(o.value)
	if err != nil {
		a.at(o.pos, "%s=%s is not a duration (want a Go duration like 30s, 5m or 24h)", o.name, o.value)
		return 0
	}
	if d <= 0 {
		a.at(o.pos, "%s=%s must be positive", o.name, o.value)
		return 0
	}
	return d
}

// path resolves a field path like req.Customer.ID rooted at the request
// parameter of m.
func (a *analyzer) path(m *Method, what, text string, pos token.Pos) *Path {
	parts := strings.Split(text, ".")
	for _, p := range parts {
		if !token.IsIdentifier(p) {
			a.at(pos, "%s=%s is not a field path like req.Field", what, text)
			return nil
		}
	}
	if m.Req == nil { // the method's shape is wrong; reported already
		return nil
	}
	params := m.Sig.Params()
	root := -1
	for i := range params.Len() {
		if params.At(i).Name() == parts[0] && parts[0] != "_" {
			root = i
		}
	}
	if root < 0 {
		a.at(pos, "%s=%s: %s has no parameter named %s", what, text, m.Name, parts[0])
		return nil
	}
	if root != m.ReqIndex {
		a.at(pos, "%s=%s: %s is not the request parameter; paths start at %s", what, text, parts[0], params.At(m.ReqIndex).Name())
		return nil
	}
	p := &Path{Text: text, Param: root}
	t := params.At(root).Type()
	if len(parts) == 1 {
		if what == "fingerprint" {
			a.at(pos, "fingerprint=%s names the whole request, which is the default fingerprint; leave fingerprint= out or name fields", text)
			return nil
		}
		p.Type = t
		return p
	}
	for _, name := range parts[1:] {
		obj, index, _ := types.LookupFieldOrMethod(t, false, a.pkg.Types, name)
		switch obj := obj.(type) {
		case nil:
			a.at(pos, "%s=%s: %s has no field %s", what, text, a.typeString(t), name)
			return nil
		case *types.Func:
			a.at(pos, "%s=%s: %s is a method of %s, not a field", what, text, name, a.typeString(t))
			return nil
		case *types.Var:
			if len(index) > 1 {
				// A promoted field: spell out the embedded fields so
				// that each pointer on the way can be checked for nil.
				steps, named, ptr := a.expand(t, index)
				switch {
				case named:
					p.Steps = append(p.Steps, steps...)
				case ptr:
					a.at(pos, "%s=%s: %s is promoted through an embedded pointer field that this package cannot name, so the wrapper cannot check it for nil; choose another field", what, text, name)
					return nil
				default:
					p.Steps = append(p.Steps, Step{Field: obj.Name(), Type: obj.Type()})
				}
			} else {
				p.Steps = append(p.Steps, Step{Field: obj.Name(), Type: obj.Type()})
			}
			t = obj.Type()
		}
	}
	p.Type = t
	return p
}

// expand turns the index path of a promoted field into explicit steps. It
// reports whether every embedded field on the way can be named from the
// package, and whether one of them is a pointer.
func (a *analyzer) expand(t types.Type, index []int) (steps []Step, named, ptr bool) {
	named = true
	for j, i := range index {
		u := t.Underlying()
		if p, ok := u.(*types.Pointer); ok {
			u = p.Elem().Underlying()
		}
		st, ok := u.(*types.Struct)
		if !ok {
			return nil, false, true
		}
		f := st.Field(i)
		if !f.Exported() && f.Pkg() != a.pkg.Types {
			named = false
		}
		if j < len(index)-1 && isPointer(f.Type()) {
			ptr = true
		}
		steps = append(steps, Step{Field: f.Name(), Type: f.Type()})
		t = f.Type()
	}
	return steps, named, ptr
}

// checkReconcile checks that the reconcile method of m exists with the
// signature of a runtime.QueryFunc for m's request and response.
func (a *analyzer) checkReconcile(s *Service, m *Method, byName map[string]*Method) {
	if m.Reconcile == "" {
		return
	}
	pos := m.dirPos
	r, ok := byName[m.Reconcile]
	if !ok {
		a.at(pos, "reconcile=%s: %s has no method %s", m.Reconcile, s.Name, m.Reconcile)
		m.Reconcile = ""
		return
	}
	if !r.Skip {
		a.at(pos, "reconcile=%s: %s is an //idem:op itself; a reconcile method answers \"did it happen?\" and must be //idem:skip", m.Reconcile, m.Reconcile)
		return
	}
	if m.Req == nil {
		return
	}
	want := fmt.Sprintf("func(ctx context.Context, req %s) (%s, runtime.Outcome, error)", a.typeString(m.Req), a.typeString(m.Resp))
	sig := r.Sig
	ok = !sig.Variadic() && sig.Params().Len() == 2 && sig.Results().Len() == 3 &&
		isContext(sig.Params().At(0).Type()) && types.Identical(sig.Params().At(1).Type(), m.Req) &&
		types.Identical(sig.Results().At(0).Type(), m.Resp) && isOutcome(sig.Results().At(1).Type()) &&
		isError(sig.Results().At(2).Type())
	if !ok {
		a.at(pos, "reconcile=%s: %s has type %s; want %s", m.Reconcile, m.Reconcile, a.typeString(sig), want)
	}
}

// jsonProblem tells why encoding/json cannot encode values of t, or "".
func jsonProblem(t types.Type, pkg *types.Package, seen map[types.Type]bool) string {
	if seen[t] {
		return ""
	}
	seen[t] = true
	if hasMarshaler(t) {
		return ""
	}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		if u.Info()&types.IsComplex != 0 || u.Kind() == types.UnsafePointer {
			return fmt.Sprintf("type %s is not supported by encoding/json", types.TypeString(t, types.RelativeTo(pkg)))
		}
	case *types.Pointer:
		return jsonProblem(u.Elem(), pkg, seen)
	case *types.Slice:
		return jsonProblem(u.Elem(), pkg, seen)
	case *types.Array:
		return jsonProblem(u.Elem(), pkg, seen)
	case *types.Map:
		k := u.Key()
		if kb, ok := k.Underlying().(*types.Basic); !(ok && kb.Info()&(types.IsString|types.IsInteger) != 0) && !hasMarshaler(k) {
			return fmt.Sprintf("map key type %s is not supported by encoding/json", types.TypeString(k, types.RelativeTo(pkg)))
		}
		return jsonProblem(u.Elem(), pkg, seen)
	case *types.Chan, *types.Signature:
		return fmt.Sprintf("type %s is not supported by encoding/json", types.TypeString(t, types.RelativeTo(pkg)))
	case *types.Struct:
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() && !f.Embedded() {
				continue
			}
			if tag, _, _ := strings.Cut(reflect.StructTag(u.Tag(i)).Get("json"), ","); tag == "-" {
				continue
			}
			if why := jsonProblem(f.Type(), pkg, seen); why != "" {
				return "field " + f.Name() + ": " + why
			}
		}
	}
	return ""
}

func hasMarshaler(t types.Type) bool {
	for _, tt := range []types.Type{t, types.NewPointer(t)} {
		ms := types.NewMethodSet(tt)
		for _, name := range []string{"MarshalJSON", "MarshalText"} {
			if ms.Lookup(nil, name) != nil {
				return true
			}
		}
	}
	return false
}

// outputs checks the generated file names of the package's services.
func (a *analyzer) outputs() {
	files := map[string]*Service{}
	var builds *builds
	for _, s := range a.services {
		if prev, dup := files[s.File]; dup {
			a.at(s.Pos, "%s and %s would both be generated into %s; set //idem:service file= on one of them", prev.Name, s.Name, s.File)
			continue
		}
		files[s.File] = s
		path := filepath.Join(s.Dir, s.File)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if !IsGenerated(b) {
			a.at(s.Pos, "%s exists and was not generated by idemgen; refusing to overwrite it (rename it or set //idem:service file=)", s.File)
			continue
		}
		other := generatedFor(path)
		if other == s.Build {
			continue
		}
		if builds == nil {
			builds = packageBuilds(a.pkg)
		}
		if builds.other(other) {
			a.at(s.Pos, "%s holds the wrapper of a service of another build (//go:build %s); set //idem:service file= on one of them", s.File, other)
		}
	}
}

// IsGenerated reports whether src is a file idemgen generated.
func IsGenerated(src []byte) bool {
	line, _, _ := strings.Cut(string(src), "\n")
	return strings.TrimRight(line, "\r") == Header
}

// snakeCase turns an interface name into a file name stem: Payments ->
// payments, HTTPServer -> http_server, OrderAPI -> order_api.
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
				(i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// interfaceResponse reports whether t is an interface type or a pointer (to
// a pointer...) to one: the runtime cannot replay such a response (it does
// not know which type to decode it into). An interface inside a slice, map
// or struct holds JSON's generic values on a replay, as the README says.
func interfaceResponse(t types.Type) bool {
	// At most a few levels: type P *P is a pointer to itself.
	for range 64 {
		// Underlying: a defined type of a pointer (type Ref *fmt.Stringer)
		// is a pointer too (review r57).
		p, ok := t.Underlying().(*types.Pointer)
		if !ok {
			return types.IsInterface(t)
		}
		t = p.Elem()
	}
	return false
}
