package facts

import (
	"go/ast"
	"go/build"
	"go/types"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"
)

// SSA is the SSA form of the analyzed package: its source functions,
// function literals included, in source order.
type SSA struct {
	Pkg      *ssa.Package
	SrcFuncs []*ssa.Function
}

var goroot = filepath.Clean(build.Default.GOROOT) + string(filepath.Separator)

// isStd reports whether the pass analyzes a package of the standard
// library. The rules know its network entry points by name, so its bodies
// are not built: that is most of the work on a typical module's
// dependencies.
func isStd(pass *analysis.Pass) bool {
	if len(pass.Files) == 0 {
		return true
	}
	name := pass.Fset.Position(pass.Files[0].Pos()).Filename
	return strings.HasPrefix(filepath.Clean(name), goroot)
}

// modeled are the libraries whose network and transaction entry points the
// rules know by name; their bodies are not analyzed either.
// Firestore, Datastore and Spanner are databases with transactions of their
// own: their calls are not remote effects.
// The ORMs (gorm, bun, sqlx, pop, ent's runtime) reach the database
// through database/sql, and their transaction entry points are known by
// name.
var modeled = []string{pkgPgx, pkgRedis, pkgGRPC, "google.golang.org/protobuf", "google.golang.org/genproto",
	pkgFirestore, "cloud.google.com/go/datastore", "cloud.google.com/go/spanner",
	pkgGorm, pkgBun, pkgSqlx, "github.com/gobuffalo/pop", "entgo.io/ent"}

// IsModeled reports whether the package or module path is one of the
// libraries the rules model by name, whose bodies are not analyzed.
func IsModeled(path string) bool { return isModeled(path) }

func isModeled(path string) bool {
	for _, m := range modeled {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

// buildSSA builds the package's SSA form (bodies of this package only).
func buildSSA(pass *analysis.Pass) *SSA {
	out := &SSA{}
	if isStd(pass) || isModeled(pass.Pkg.Path()) {
		return out
	}
	prog := ssa.NewProgram(pass.Fset, ssa.InstantiateGenerics)
	for _, p := range pass.Pkg.Imports() {
		prog.CreatePackage(p, nil, nil, true)
	}
	pkg := prog.CreatePackage(pass.Pkg, pass.Files, pass.TypesInfo, false)
	pkg.Build()
	out.Pkg = pkg
	var add func(fn *ssa.Function)
	add = func(fn *ssa.Function) {
		out.SrcFuncs = append(out.SrcFuncs, fn)
		for _, anon := range fn.AnonFuncs {
			add(anon)
		}
	}
	for _, f := range pass.Files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			obj, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok {
				continue
			}
			if fn := prog.FuncValue(obj); fn != nil {
				add(fn)
			}
		}
	}
	return out
}
