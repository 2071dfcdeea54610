package main

import (
	"bytes"
	"crypto/sha256"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A save usually changes the body of a function, and most of its cost
// was the `go list -export -compiled -deps -test` the server ran to see
// it (on pocketbase about 90% of a save's CPU, most of it compiling the
// edited package for export data nothing reads when nobody imports it).
// listing keeps a directory's last go list output with the state of the
// files it was made from, and lastListing gives it again when the files
// changed since cannot change what go list would say about any package
// the analysis reads export data of:
//
//   - no file was added, removed or renamed under the module root (the
//     walk skips what the go command ignores: "." and "_" directories,
//     testdata) nor in a listed package's directory outside it, and no
//     go.mod, go.sum, go.work, go.work.sum, vendor/modules.txt, nor any
//     .s, .c, .h or .syso file changed;
//   - every changed file is a .go file under the module root whose
//     header (everything up to the end of its import declarations: the
//     //go:build lines, the package clause, the imports) is the same,
//     that parses, is not cgo (import "C") nor generated ("Code
//     generated ... DO NOT EDIT.");
//   - no listed package other than the edited ones imports, directly or
//     not, a package with a changed file (the generated test main aside,
//     which is never analyzed): the edited packages are type-checked from
//     source, and their stale export data is read by nobody;
//   - every export file of the listing is still in the build cache.
//
// Then the package list, each package's files, imports and dependencies
// are what go list would give, and only the edited packages' export data
// differs, which no analyzed package reads. Anything else runs go list,
// and so does a save after a run that had load errors, or whose edited
// package fails to type-check from source (its error is then go list's).
type listing struct {
	key  [sha256.Size]byte // settings, patterns and tests
	pkgs []*listed
	snap *snapshot
}

// snapshot is the state of the files a listing depends on.
type snapshot struct {
	files   map[string][sha256.Size]byte // path -> content sum (zero: name only)
	headers map[string]string            // .go path -> header (see goHeader)
}

// hashed reports whether a file's contents, not only its name, are part
// of a snapshot.
func hashed(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".s", ".c", ".h", ".syso", ".mod", ".sum", ".work":
		return true
	}
	return name == "modules.txt"
}

// takeSnapshot records the files under root (as the go command walks a
// module) and in the directories of pkgs outside root and outside the
// module cache, and the go.work files of root and its parents.
func takeSnapshot(root string, pkgs []*listed, modCache string) (*snapshot, error) {
	s := &snapshot{files: map[string][sha256.Size]byte{}, headers: map[string]string{}}
	add := func(path string) error {
		if !hashed(filepath.Base(path)) {
			s.files[path] = [sha256.Size]byte{}
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s.files[path] = sha256.Sum256(data)
		if strings.HasSuffix(path, ".go") {
			s.headers[path] = goHeader(path, data)
		}
		return nil
	}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		return add(path)
	})
	if err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for _, p := range pkgs {
		if p.Dir != "" && !stable(p, modCache) && !within(root, p.Dir) {
			dirs[p.Dir] = true
		}
	}
	for dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.IsDir() {
				if err := add(filepath.Join(dir, e.Name())); err != nil {
					return nil, err
				}
			}
		}
	}
	for dir := root; ; dir = filepath.Dir(dir) {
		for _, name := range []string{"go.work", "go.work.sum"} {
			path := filepath.Join(dir, name)
			if _, err := os.Stat(path); err == nil {
				if err := add(path); err != nil {
					return nil, err
				}
			} else {
				s.files[path+" (absent)"] = [sha256.Size]byte{}
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return s, nil
}

// within reports whether path is root or under it.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// goHeader is what of a Go file decides which build it belongs to and
// what it imports: its text up to the end of its import declarations.
// It is "" for a file that does not parse, imports "C" or is generated:
// such a file's edits always run go list.
func goHeader(path string, src []byte) string {
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil || ast.IsGenerated(f) {
		return ""
	}
	end := f.Name.End()
	for _, imp := range f.Imports {
		if imp.Path.Value == `"C"` {
			return ""
		}
	}
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.IMPORT && g.End() > end {
			end = g.End()
		}
	}
	off := int(end) - 1 // the file's base is 1
	if off < 0 || off > len(src) {
		return ""
	}
	return string(bytes.Clone(src[:off]))
}

// stillValid reports whether the listing can be given again for the files
// as they are now (see listing), and returns their snapshot.
func (ls *listing) stillValid(root, modCache string) (*snapshot, bool) {
	now, err := takeSnapshot(root, ls.pkgs, modCache)
	if err != nil || len(now.files) != len(ls.snap.files) {
		return nil, false
	}
	changed := map[string]bool{}
	for path, sum := range now.files {
		old, had := ls.snap.files[path]
		if !had {
			return nil, false
		}
		if old == sum {
			continue
		}
		h := now.headers[path]
		if !strings.HasSuffix(path, ".go") || !within(root, path) || h == "" || h != ls.snap.headers[path] {
			return nil, false
		}
		changed[path] = true
	}
	edited := map[string]bool{}
	for _, p := range ls.pkgs {
		if _, err := os.Stat(p.Export); p.Export != "" && err != nil {
			return nil, false
		}
		if stable(p, modCache) {
			continue
		}
		for _, name := range p.CompiledGoFiles {
			if !filepath.IsAbs(name) {
				name = filepath.Join(p.Dir, name)
			} else if !within(p.Dir, name) {
				return nil, false // cgo's output: go list made it
			}
			if changed[name] {
				edited[p.ImportPath] = true
			}
		}
	}
	for _, q := range ls.pkgs {
		if strings.HasSuffix(q.ImportPath, ".test") {
			continue
		}
		if slices.ContainsFunc(q.Deps, func(dep string) bool { return edited[dep] }) {
			return nil, false
		}
	}
	return now, true
}

// subsetOf reports whether t records every file of s, the same.
func (s *snapshot) subsetOf(t *snapshot) bool {
	for path, sum := range s.files {
		if u, ok := t.files[path]; !ok || u != sum {
			return false
		}
	}
	return true
}
