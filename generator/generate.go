// Package generator turns annotated Go interfaces into typed idempotent
// wrappers on the idem runtime.
//
// It loads the packages once with go/packages (with the build tag
// [BuildTag], so that generated files, which carry "//go:build !idemgen",
// never take part), finds the //idem:service interfaces, checks every
// directive and method against go/types, and emits one file per service
// with github.com/dave/jennifer. See docs/idemgen.md for the directives.
package generator

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
)

// File is one generated file.
type File struct {
	Path    string // absolute
	Content []byte
}

// Timing splits the time of a run into its phases.
type Timing struct {
	Load  time.Duration // go/packages: go list, parsing and type-checking
	Check time.Duration // directives, model and checks
	Emit  time.Duration // rendering with jennifer and gofmt
}

// Result is what a run generates.
type Result struct {
	Services []*Service
	Files    []File
	// Stale are files idemgen generated earlier that no service generates
	// any more; they should be removed.
	Stale  []string
	Timing Timing
}

// Generate loads the packages of cfg, checks them and renders the files of
// their services. When the source has problems the error is an [ErrorList]
// with all of them, and nothing is rendered.
func Generate(cfg Config) (*Result, error) {
	t0 := time.Now()
	pkgs, err := Load(cfg)
	res := &Result{}
	res.Timing.Load = time.Since(t0)
	if err != nil {
		return res, err
	}
	return res, GeneratePackages(pkgs, res)
}

// GeneratePackages is [Generate] on packages loaded already with [Load]; it
// fills in res.
func GeneratePackages(pkgs []*packages.Package, res *Result) error {
	t1 := time.Now()
	var all ErrorList
	type pkgServices struct {
		pkg      *packages.Package
		services []*Service
	}
	var found []pkgServices
	seen := map[string]bool{}
	for _, pkg := range pkgs {
		if seen[pkg.ID] {
			continue
		}
		seen[pkg.ID] = true
		svcs, errs := Analyze(pkg)
		all = append(all, errs...)
		if len(svcs) > 0 {
			all = append(all, shadowedBuiltins(pkg)...)
		}
		found = append(found, pkgServices{pkg, svcs})
	}
	res.Timing.Check += time.Since(t1)
	if len(all) > 0 {
		return all.sorted()
	}

	t2 := time.Now()
	for _, ps := range found {
		taken := packageNames(ps.pkg, ps.services)
		produced := map[string]bool{}
		for _, s := range ps.services {
			src, err := Emit(s, taken)
			if err != nil {
				return err
			}
			path := filepath.Join(s.Dir, s.File)
			produced[path] = true
			res.Files = append(res.Files, File{Path: path, Content: src})
			res.Services = append(res.Services, s)
		}
		res.Stale = append(res.Stale, staleFiles(ps.pkg, produced)...)
	}
	res.Timing.Emit += time.Since(t2)
	return nil
}

// packageNames are the identifiers of pkg's package scope, plus what
// idemgen declares there.
func packageNames(pkg *packages.Package, svcs []*Service) map[string]bool {
	taken := map[string]bool{}
	for _, n := range pkg.Types.Scope().Names() {
		taken[n] = true
	}
	for _, s := range svcs {
		taken[s.Constructor] = true
	}
	for _, s := range svcs {
		s.Wrapper = namer(taken).fresh("idem" + s.Name)
	}
	return taken
}

// staleFiles lists the files in pkg's directory that idemgen generated but
// that are not in produced. A wrapper whose //go:build line is that of
// source files this build left out, and of none it built, is of another
// build (a service in a file this build does not see): it is not stale.
func staleFiles(pkg *packages.Package, produced map[string]bool) []string {
	var dir string
	switch {
	case len(pkg.GoFiles) > 0:
		dir = filepath.Dir(pkg.GoFiles[0])
	case len(pkg.IgnoredFiles) > 0:
		dir = filepath.Dir(pkg.IgnoredFiles[0])
	default:
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	var b *builds
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		if produced[path] || !isGeneratedFile(path) {
			continue
		}
		if build := generatedFor(path); build != "" {
			if b == nil {
				b = packageBuilds(pkg)
			}
			if b.other(build) {
				continue
			}
		}
		out = append(out, path)
	}
	slices.Sort(out)
	return out
}

// isGeneratedFile reports whether the file at path starts with [Header].
func isGeneratedFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(Header)+2)
	n, _ := f.Read(head)
	return IsGenerated(head[:n]) || bytes.Equal(bytes.TrimRight(head[:n], "\r\n"), []byte(Header))
}

// shadowedBuiltins reports, at its declaration, each builtin a generated
// wrapper names that pkg declares at package scope: the wrapper would name
// the package's own, a file that does not compile (review r54). The empty
// interface is written interface{} where the package declares any.
func shadowedBuiltins(pkg *packages.Package) ErrorList {
	var errs ErrorList
	for _, name := range []string{"len", "nil", "panic", "string"} {
		obj := pkg.Types.Scope().Lookup(name)
		if obj == nil {
			continue
		}
		errs = append(errs, Error{Pos: pkg.Fset.Position(obj.Pos()),
			Msg: fmt.Sprintf("package %s declares %s, which generated wrappers use as the builtin %s: rename it", pkg.Types.Name(), name, name)})
	}
	return errs
}
