package generator

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
)

// A service declared in a file with a build constraint (a //go:build line,
// or a name such as pay_linux.go) exists only in the builds that file is
// in: its wrapper carries the same constraint, so that other builds do not
// see a constructor for an interface they lack. A run of idemgen in a build
// that leaves the file out does not see the service; the wrapper is then of
// another build, not stale (see [staleFiles]).

// fileConstraint returns the build constraint of the Go file at path, whose
// imports are f (nil: read from disk), as one expression: its
// //go:build line (or its // +build lines), the GOOS and GOARCH its name
// implies, and cgo when it imports "C" (the go command leaves such a file
// out of a build without cgo, CGO_ENABLED=0). It is nil when the file has
// none, or its header cannot be read.
func fileConstraint(path string, f *ast.File) constraint.Expr {
	if f == nil {
		var err error
		f, err = parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return nameConstraint(filepath.Base(path))
		}
	}
	x := and(headerConstraint(path), nameConstraint(filepath.Base(path)))
	for _, imp := range f.Imports {
		if imp.Path != nil && imp.Path.Value == `"C"` {
			return and(x, &constraint.TagExpr{Tag: "cgo"})
		}
	}
	return x
}

// sourceConstraint is the build constraint of the source file f was parsed
// from. A file that imports "C" reaches a load with cgo as the go command's
// cgo output (a file of the build cache, whose //line comments name the
// source): its constraint is read from the source file, which imports "C".
func sourceConstraint(fset *token.FileSet, f *ast.File) constraint.Expr {
	parsed := fset.File(f.Pos()).Name()
	if src := fset.Position(f.Package).Filename; src != "" && src != parsed {
		return fileConstraint(src, nil)
	}
	return fileConstraint(parsed, f)
}

// headerConstraint is the constraint of the //go:build line (or the
// // +build lines) of the file at path, read as the go command reads them
// (see [sourceHeader]); nil when it has none, or cannot be read.
func headerConstraint(path string) constraint.Expr {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return sourceHeaderConstraint(b)
}

// sourceHeaderConstraint is the build constraint of a Go file whose source
// is content: its //go:build line, or else its // +build lines, as the go
// command reads them (see [sourceHeader]).
func sourceHeaderConstraint(content []byte) constraint.Expr {
	header, goBuild := sourceHeader(content)
	if goBuild != "" {
		if x, err := constraint.Parse(goBuild); err == nil {
			return x
		}
		return nil
	}
	var plusBuild constraint.Expr
	for line := range strings.SplitSeq(header, "\n") {
		line = strings.TrimSpace(line)
		if constraint.IsPlusBuild(line) {
			if x, err := constraint.Parse(line); err == nil {
				plusBuild = and(plusBuild, x)
			}
		}
	}
	return plusBuild
}

// sourceHeader splits a Go file's source the way go/build does (its
// parseFileHeader): the //go:build line is the first one among the
// comments before the first text that is not a comment; // +build lines
// count only in header, the lines up to the last blank line before the
// first line that is not a // comment (a /* */ comment ends that run: a
// // +build line above a block comment with no blank line between is not
// read, review r58; nor is one in the package's doc comment, review r57).
func sourceHeader(content []byte) (header, goBuild string) {
	src := strings.TrimPrefix(string(content), "\ufeff") // go/build drops a leading BOM
	end := 0
	ended := false
	inSlashStar := false
	rest := src
Lines:
	for len(rest) > 0 {
		line := rest
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line, rest = line[:i], rest[i+1:]
		} else {
			rest = ""
		}
		line = strings.TrimSpace(line)
		if line == "" && !ended {
			end = len(src) - len(rest)
			continue
		}
		if !strings.HasPrefix(line, "//") {
			ended = true
		}
		if !inSlashStar && constraint.IsGoBuild(line) && goBuild == "" {
			goBuild = line
		}
		for line != "" {
			if inSlashStar {
				i := strings.Index(line, "*/")
				if i < 0 {
					continue Lines
				}
				inSlashStar = false
				line = strings.TrimSpace(line[i+2:])
				continue
			}
			if strings.HasPrefix(line, "//") {
				continue Lines
			}
			if strings.HasPrefix(line, "/*") {
				inSlashStar = true
				line = strings.TrimSpace(line[2:])
				continue
			}
			break Lines // text that is not a comment
		}
	}
	return src[:end], goBuild
}

// and is x && y, either of which may be nil (no constraint).
func and(x, y constraint.Expr) constraint.Expr {
	switch {
	case x == nil:
		return y
	case y == nil:
		return x
	}
	return &constraint.AndExpr{X: x, Y: y}
}

// nameConstraint is the constraint a file name implies, as the go command
// reads it (name_GOOS.go, name_GOARCH.go, name_GOOS_GOARCH.go, each maybe
// before _test): nil when it implies none. The tag of a GOOS matches where
// the suffix does (linux on android, solaris on illumos, darwin on ios).
func nameConstraint(name string) constraint.Expr {
	name, _, _ = strings.Cut(name, ".")
	i := strings.Index(name, "_")
	if i < 0 {
		return nil
	}
	l := strings.Split(name[i:], "_")
	if n := len(l); n > 0 && l[n-1] == "test" {
		l = l[:n-1]
	}
	n := len(l)
	if n >= 2 && knownOS(l[n-2]) && knownArch(l[n-1]) {
		return &constraint.AndExpr{X: &constraint.TagExpr{Tag: l[n-2]}, Y: &constraint.TagExpr{Tag: l[n-1]}}
	}
	if n >= 1 && (knownOS(l[n-1]) || knownArch(l[n-1])) {
		return &constraint.TagExpr{Tag: l[n-1]}
	}
	return nil
}

// wrapperConstraint is the //go:build line of a wrapper for a service whose
// file has the constraint build ("" none; text of a constraint.Expr):
// generated files are left out of idemgen's own loads.
func wrapperConstraint(build string) string {
	own := constraint.Expr(&constraint.NotExpr{X: &constraint.TagExpr{Tag: BuildTag}})
	if build != "" {
		if x, err := constraint.Parse("//go:build " + build); err == nil {
			own = and(own, x)
		}
	}
	return "//go:build " + own.String()
}

// generatedFor returns the constraint of the service a generated file's
// //go:build line was written for (see [wrapperConstraint]), as text: ""
// for none, or when the line is not one idemgen writes.
func generatedFor(path string) string {
	rest, ok := withoutOwn(headerConstraint(path))
	if !ok {
		return ""
	}
	return constraintText(rest)
}

// withoutOwn returns x without its first conjunct, which must be
// !idemgen: x is "!idemgen && y" (read as "(!idemgen && a) && b" when y is
// "a && b"), or "!idemgen" alone (y nil).
func withoutOwn(x constraint.Expr) (constraint.Expr, bool) {
	switch x := x.(type) {
	case *constraint.NotExpr:
		return nil, x.X.String() == BuildTag
	case *constraint.AndExpr:
		if n, ok := x.X.(*constraint.NotExpr); ok && n.X.String() == BuildTag {
			return x.Y, true
		}
		if rest, ok := withoutOwn(x.X); ok && rest != nil {
			return &constraint.AndExpr{X: rest, Y: x.Y}, true
		}
	}
	return nil, false
}

// constraintText is x as text, "" for none.
func constraintText(x constraint.Expr) string {
	if x == nil {
		return ""
	}
	return x.String()
}

// knownOS reports whether s is a GOOS value file names are read for, as
// go/build's list (internal/syslist) has them.
func knownOS(s string) bool {
	switch s {
	case "aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
		"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos":
		return true
	}
	return false
}

// knownArch reports whether s is a GOARCH value file names are read for.
func knownArch(s string) bool {
	switch s {
	case "386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64",
		"mips", "mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le",
		"riscv", "riscv64", "s390", "s390x", "sparc", "sparc64", "wasm":
		return true
	}
	return false
}

// builds are the constraints of a package's source files (not generated
// ones), by whether the load that gave the package built them.
type builds struct {
	built, left map[string]bool
}

// packageBuilds reads the constraints of pkg's files: the ones it was
// built with and the ones its build constraints left out.
func packageBuilds(pkg *packages.Package) *builds {
	b := &builds{built: map[string]bool{}, left: map[string]bool{}}
	for _, files := range []struct {
		paths []string
		into  map[string]bool
	}{{pkg.GoFiles, b.built}, {pkg.IgnoredFiles, b.left}} {
		for _, path := range files.paths {
			if !strings.HasSuffix(path, ".go") || isGeneratedFile(path) {
				continue
			}
			files.into[constraintText(fileConstraint(path, nil))] = true
		}
	}
	return b
}

// other reports whether build (a generated file's, see [generatedFor]) is
// the constraint of source files this build left out, and of none it
// built: the file is a wrapper for a service of another build.
func (b *builds) other(build string) bool {
	return build != "" && !b.built[build] && b.left[build]
}
