// Package idemops reads idemgen's directives (//idem:service, //idem:op,
// //idem:skip; see docs/idemgen.md) into analysis facts, so that the rules
// serverkey and bypass see the services of every package a package
// imports: which methods are ops, which request field holds the key, and
// whether the generated wrapper exists.
package idemops

import (
	"fmt"
	"go/ast"
	"go/types"
	"reflect"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Op is one //idem:op method.
type Op struct {
	Method  string
	Key     string   // the key option as written: req.IdempotencyKey
	KeyPath []string // the field path below the request: [IdempotencyKey]
	ReqPkg  string   // the request type's package path
	ReqType string   // the request type's name
}

// Service is one //idem:service interface.
type Service struct {
	Pkg     string
	Name    string
	Wrapper string // the generated constructor (NewIdempotentX), "" when absent
	Ops     []Op
	Skips   []string
}

// Op returns the op named m, or nil.
func (s *Service) Op(m string) *Op {
	for i := range s.Ops {
		if s.Ops[i].Method == m {
			return &s.Ops[i]
		}
	}
	return nil
}

// Services is the package fact: the services a package declares.
type Services struct{ List []Service }

func (*Services) AFact() {}
func (f *Services) String() string {
	var b []string
	for _, s := range f.List {
		var ops []string
		for _, o := range s.Ops {
			ops = append(ops, o.Method+"("+o.Key+")")
		}
		b = append(b, fmt.Sprintf("%s{ops: %s; skip: %s; wrapper: %s}", s.Name, strings.Join(ops, ","), strings.Join(s.Skips, ","), s.Wrapper))
	}
	return "services(" + strings.Join(b, " ") + ")"
}

// Result lists the services of the package and of all its dependencies.
type Result struct{ Services []Service }

// Analyzer computes the Services facts.
var Analyzer = &analysis.Analyzer{
	Name:       "idemops",
	Doc:        "reads idemgen's //idem:service, //idem:op and //idem:skip directives into facts",
	FactTypes:  []analysis.Fact{new(Services)},
	ResultType: reflect.TypeOf((*Result)(nil)),
	Run:        run,
}

func run(pass *analysis.Pass) (any, error) {
	var own []Service
	files := pass.Files
	if rulekit.IsStd(pass.Fset, files) {
		files = nil // no services in the standard library
	}
	for _, f := range files {
		if !strings.Contains(fileText(f), "//idem:") {
			continue
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, sp := range gd.Specs {
				ts, ok := sp.(*ast.TypeSpec)
				if !ok {
					continue
				}
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				if !hasDirective(doc, "service") {
					continue
				}
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok {
					continue
				}
				own = append(own, service(pass, ts.Name.Name, it))
			}
		}
	}
	if len(own) > 0 {
		pass.ExportPackageFact(&Services{List: own})
	}
	res := &Result{Services: own}
	for _, pf := range pass.AllPackageFacts() {
		if s, ok := pf.Fact.(*Services); ok && pf.Package != pass.Pkg {
			res.Services = append(res.Services, s.List...)
		}
	}
	sort.Slice(res.Services, func(i, j int) bool {
		a, b := res.Services[i], res.Services[j]
		return a.Pkg+"."+a.Name < b.Pkg+"."+b.Name
	})
	return res, nil
}

func fileText(f *ast.File) string {
	var b strings.Builder
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "//idem:") {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// directive returns the options of the //idem:<name> directive in doc.
func directive(doc *ast.CommentGroup, name string) ([]string, bool) {
	if doc == nil {
		return nil, false
	}
	for _, c := range doc.List {
		rest, ok := strings.CutPrefix(c.Text, "//idem:"+name)
		if ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Fields(rest), true
		}
	}
	return nil, false
}

func hasDirective(doc *ast.CommentGroup, name string) bool {
	_, ok := directive(doc, name)
	return ok
}

func service(pass *analysis.Pass, name string, it *ast.InterfaceType) Service {
	s := Service{Pkg: pass.Pkg.Path(), Name: name}
	for _, ctor := range []string{"NewIdempotent" + name, "newIdempotent" + name} {
		if _, ok := pass.Pkg.Scope().Lookup(ctor).(*types.Func); ok {
			s.Wrapper = ctor
		}
	}
	for _, m := range it.Methods.List {
		if len(m.Names) != 1 {
			continue
		}
		mn := m.Names[0].Name
		if hasDirective(m.Doc, "skip") {
			s.Skips = append(s.Skips, mn)
			continue
		}
		opts, ok := directive(m.Doc, "op")
		if !ok {
			continue
		}
		op := Op{Method: mn}
		for _, o := range opts {
			if v, ok := strings.CutPrefix(o, "key="); ok {
				op.Key = v
			}
		}
		parts := strings.Split(op.Key, ".")
		if len(parts) >= 2 {
			op.KeyPath = parts[1:]
			if fn, ok := pass.TypesInfo.Defs[m.Names[0]].(*types.Func); ok {
				sig := fn.Type().(*types.Signature)
				for i := 0; i < sig.Params().Len(); i++ {
					if p := sig.Params().At(i); p.Name() == parts[0] {
						t := p.Type()
						if pt, ok := t.(*types.Pointer); ok {
							t = pt.Elem()
						}
						if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil {
							op.ReqPkg, op.ReqType = n.Obj().Pkg().Path(), n.Obj().Name()
						}
					}
				}
			}
		}
		s.Ops = append(s.Ops, op)
	}
	return s
}
