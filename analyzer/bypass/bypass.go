// Package bypass defines an analyzer that reports a call of an //idem:op
// method on the concrete implementation of an //idem:service interface,
// which skips the generated idempotent wrapper.
package bypass

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/directive"
	"github.com/idemkit/idem/analyzer/internal/idemops"
	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "bypass"

// Doc documents the analyzer.
const Doc = `report calls that skip the generated idempotent wrapper

idemgen generates, for an //idem:service interface, a wrapper
(NewIdempotentX) that runs each //idem:op method at most once per
idempotency key. A call of an //idem:op method on the concrete type that
implements the interface, made outside that type's own package, runs the
inner implementation with no idempotency record: a retry or a duplicate
runs the effect again (a second charge), and an UNKNOWN outcome is never
recorded for the reconciler. Build the service once with
NewIdempotentX(inner, rt) and pass the interface around instead of the
concrete type. //idem:skip methods are pass-through and are not reported.

Suppress with //idemlint:ignore bypass <reason>.`

// Config configures a bypass analyzer.
type Config struct{}

// Analyzer is the default bypass analyzer.
var Analyzer = New(Config{})

// New returns a bypass analyzer for cfg.
func New(Config) *analysis.Analyzer {
	return &analysis.Analyzer{
		Name:     Name,
		Doc:      Doc,
		URL:      "https://github.com/idemkit/idem/blob/main/docs/rules/bypass.md",
		Requires: []*analysis.Analyzer{idemops.Analyzer},
		Run:      run,
	}
}

// service is a wrapped //idem:service with its interface type.
type service struct {
	*idemops.Service
	iface *types.Interface
	obj   *types.TypeName
	ctor  *types.Func
}

func run(pass *analysis.Pass) (any, error) {
	res := pass.ResultOf[idemops.Analyzer].(*idemops.Result)
	var svcs []service
	for i := range res.Services {
		s := &res.Services[i]
		if s.Wrapper == "" {
			continue // no wrapper generated: nothing to skip
		}
		pkg := findPkg(pass.Pkg, s.Pkg)
		if pkg == nil {
			continue
		}
		tn, ok := pkg.Scope().Lookup(s.Name).(*types.TypeName)
		if !ok {
			continue
		}
		it, ok := tn.Type().Underlying().(*types.Interface)
		if !ok {
			continue
		}
		ctor, _ := pkg.Scope().Lookup(s.Wrapper).(*types.Func)
		svcs = append(svcs, service{Service: s, iface: it, obj: tn, ctor: ctor})
	}
	if len(svcs) == 0 {
		return nil, nil
	}
	rep := directive.New(pass, Name)
	for _, f := range pass.Files {
		if ast.IsGenerated(f) {
			continue
		}
		rulekit.WalkStack([]*ast.File{f}, func(n ast.Node, stack rulekit.Stack) {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return
			}
			check(pass, rep, svcs, sel, stack)
		})
	}
	return nil, nil
}

// findPkg returns the package path among p and its transitive imports.
func findPkg(p *types.Package, path string) *types.Package {
	seen := map[*types.Package]bool{}
	var walk func(*types.Package) *types.Package
	walk = func(q *types.Package) *types.Package {
		if seen[q] {
			return nil
		}
		seen[q] = true
		if q.Path() == path {
			return q
		}
		for _, i := range q.Imports() {
			if r := walk(i); r != nil {
				return r
			}
		}
		return nil
	}
	return walk(p)
}

func check(pass *analysis.Pass, rep *directive.Reporter, svcs []service, sel *ast.SelectorExpr, stack rulekit.Stack) {
	info := pass.TypesInfo
	s, ok := info.Selections[sel]
	if !ok || s.Kind() != types.MethodVal {
		return
	}
	recv := s.Recv()
	if types.IsInterface(recv) {
		return // through an interface: the wrapper, or whatever the caller was given
	}
	m, ok := s.Obj().(*types.Func)
	if !ok {
		return
	}
	// The type that declares the method: its package is the
	// implementation's own.
	declPkg := m.Pkg()
	if declPkg == nil || declPkg == pass.Pkg || strings.TrimSuffix(pass.Pkg.Path(), "_test") == declPkg.Path() {
		return
	}
	for _, sv := range svcs {
		op := sv.Op(m.Name())
		if op == nil {
			continue
		}
		ptr := recv
		if _, isPtr := recv.(*types.Pointer); !isPtr {
			ptr = types.NewPointer(recv)
		}
		if !types.Implements(recv, sv.iface) && !types.Implements(ptr, sv.iface) {
			continue
		}
		report(pass, rep, sv, op, m, recv, sel, stack)
		return
	}
}

func report(pass *analysis.Pass, rep *directive.Reporter, sv service, op *idemops.Op, m *types.Func, recv types.Type, sel *ast.SelectorExpr, stack rulekit.Stack) {
	qual := func(p *types.Package) string { return p.Name() }
	tname := types.TypeString(recv, qual)
	decl := types.TypeString(m.Type().(*types.Signature).Recv().Type(), qual)
	mname := decl + "." + m.Name()
	if strings.HasPrefix(decl, "*") {
		mname = "(" + decl + ")." + m.Name()
	}
	iname := sv.obj.Pkg().Name() + "." + sv.Name
	wrapper := sv.obj.Pkg().Name() + "." + sv.Wrapper
	pos, end := sel.Pos(), sel.End()
	var msg string
	if call, ok := stack.Parent().(*ast.CallExpr); ok && ast.Unparen(call.Fun) == sel {
		end = call.End()
		msg = fmt.Sprintf("%s is called at %s on the concrete %s, which implements the //idem:service %s: the call skips the generated wrapper %s, so the //idem:op runs with no idempotency record and a retry or a duplicate runs its effect again; "+
			"build the service with %s(inner, rt) once and call %s through the %s it returns",
			mname, rep.Posn(pos), tname, iname, wrapper, wrapper, m.Name(), iname)
	} else {
		msg = fmt.Sprintf("the method value %s is taken at %s from the concrete %s, which implements the //idem:service %s: whoever calls it skips the generated wrapper %s and runs the //idem:op with no idempotency record, so a retry runs its effect again; "+
			"take the method from the %s returned by %s(inner, rt) instead",
			mname, rep.Posn(pos), tname, iname, wrapper, iname, wrapper)
	}
	related := []analysis.RelatedInformation{}
	if im := lookupMethod(sv.iface, m.Name()); im != nil && im.Pos().IsValid() {
		related = append(related, analysis.RelatedInformation{Pos: im.Pos(), Message: fmt.Sprintf("the //idem:op %s.%s (key=%s)", sv.Name, m.Name(), op.Key)})
	}
	if sv.ctor != nil && sv.ctor.Pos().IsValid() {
		related = append(related, analysis.RelatedInformation{Pos: sv.ctor.Pos(), Message: "the generated wrapper: " + sv.Wrapper})
	}
	if len(related) == 0 {
		related = append(related, analysis.RelatedInformation{Pos: sel.Sel.Pos(), Message: "the skipped op: " + m.Name()})
	}
	rep.Report(analysis.Diagnostic{Pos: pos, End: end, Message: msg, Related: related})
}

func lookupMethod(it *types.Interface, name string) *types.Func {
	for i := 0; i < it.NumMethods(); i++ {
		if it.Method(i).Name() == name {
			return it.Method(i)
		}
	}
	return nil
}
