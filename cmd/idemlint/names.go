package main

import (
	"bufio"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"strings"

	"golang.org/x/tools/go/gcexportdata"

	"github.com/idemkit/idem/analyzer/facts"
)

// warnUnmatched warns about each configured function or type name that
// names nothing in the loaded program: a package not in it, or no such
// function, type or method in the package. Such a name (a copied example,
// a typo) changes nothing, silently. Tables and columns are not checked.
// known returns the type-checked package of a root, if any; other packages
// are read from their export data.
func warnUnmatched(w io.Writer, cfg *facts.Config, pkgs []*listed, known func(path string) *types.Package) {
	byPath := map[string]*listed{}
	for _, p := range pkgs {
		if p.path() == p.ImportPath && !p.broken() {
			byPath[p.ImportPath] = p
		}
	}
	loaded := map[string]*types.Package{}
	load := func(l *listed) *types.Package {
		if pkg, ok := loaded[l.ImportPath]; ok {
			return pkg
		}
		pkg := known(l.ImportPath)
		if pkg == nil {
			pkg = readExport(l)
		}
		loaded[l.ImportPath] = pkg
		return pkg
	}
	for _, list := range []struct {
		key   string
		names []string
		typ   bool
	}{
		{"netfuncs", cfg.NetFuncs, false},
		{"txrunners", cfg.TxRunners, false},
		{"txtypes", cfg.TxTypes, true},
		{"failfuncs", cfg.FailFuncs, false},
		{"tokendels", cfg.TokenDels, false},
	} {
		for _, name := range list.names {
			if why := unmatched(name, list.typ, byPath, load); why != "" {
				fmt.Fprintf(w, "idemlint: warning: %s: %q matches nothing: %s\n", list.key, name, why)
			}
		}
	}
}

// unmatched says why name matches nothing, or returns "".
func unmatched(name string, isType bool, byPath map[string]*listed, load func(*listed) *types.Package) string {
	n := strings.NewReplacer("(", "", ")", "", "*", "").Replace(strings.TrimSpace(name))
	var l *listed
	for path, p := range byPath {
		if strings.HasPrefix(n, path+".") && (l == nil || len(path) > len(l.ImportPath)) {
			l = p
		}
	}
	if l == nil {
		path := n
		if i := strings.IndexByte(n[strings.LastIndexByte(n, '/')+1:], '.'); i >= 0 {
			path = n[:strings.LastIndexByte(n, '/')+1+i]
		}
		return "no package " + path + " in the program"
	}
	pkg := load(l)
	if pkg == nil {
		return "" // no type information: cannot tell
	}
	parts := strings.Split(n[len(l.ImportPath)+1:], ".")
	obj := pkg.Scope().Lookup(parts[0])
	switch {
	case isType || len(parts) == 2:
		tn, ok := obj.(*types.TypeName)
		if !ok {
			return fmt.Sprintf("%s has no type %s", l.ImportPath, parts[0])
		}
		if len(parts) == 2 {
			if m, _, _ := types.LookupFieldOrMethod(tn.Type(), true, pkg, parts[1]); m == nil {
				return fmt.Sprintf("type %s.%s has no method %s", l.ImportPath, parts[0], parts[1])
			}
		}
	case len(parts) == 1:
		if _, ok := obj.(*types.Func); !ok {
			return fmt.Sprintf("%s has no function %s", l.ImportPath, parts[0])
		}
	default:
		return "not a function name"
	}
	return ""
}

// readExport reads a package's types from its export data, or returns nil.
func readExport(l *listed) *types.Package {
	if l.Export == "" {
		return nil
	}
	f, err := os.Open(l.Export)
	if err != nil {
		return nil
	}
	defer f.Close()
	//lint:ignore SA1019 the export files of this Go version are archives (see unit)
	r, err := gcexportdata.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil
	}
	pkg, err := gcexportdata.Read(r, token.NewFileSet(), map[string]*types.Package{}, l.ImportPath)
	if err != nil {
		return nil
	}
	return pkg
}
