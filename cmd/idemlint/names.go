package main

import (
	"bufio"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/tools/go/gcexportdata"

	"github.com/idemkit/idem/analyzer/facts"
)

// nameCheck checks that each configured function or type name names
// something in the loaded program: a package in it, and a function, type or
// method in the package. Such a name (a copied example, a typo) otherwise
// changes nothing, silently. Tables and columns are not checked.
//
// Names in the named packages are checked against their types as the first
// pass type-checks them (see root), so that no package's types are kept;
// the others against their export data, at the end.
type nameCheck struct {
	names []*configName
	mu    sync.Mutex
}

type configName struct {
	key, name string
	isType    bool
	pkg       *listed // the package it names, or nil
	rest      []string
	why       string // why it matches nothing, "" if it does
	checked   bool
}

func newNameCheck(cfg *facts.Config, pkgs []*listed) *nameCheck {
	byPath := map[string]*listed{}
	for _, p := range pkgs {
		if p.path() == p.ImportPath && !p.broken() {
			byPath[p.ImportPath] = p
		}
	}
	c := &nameCheck{}
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
			n := &configName{key: list.key, name: name, isType: list.typ}
			norm := strings.NewReplacer("(", "", ")", "", "*", "").Replace(strings.TrimSpace(name))
			for path, p := range byPath {
				if strings.HasPrefix(norm, path+".") && (n.pkg == nil || len(path) > len(n.pkg.ImportPath)) {
					n.pkg = p
				}
			}
			if n.pkg == nil {
				path := norm
				slash := strings.LastIndexByte(norm, '/') + 1
				if i := strings.IndexByte(norm[slash:], '.'); i >= 0 {
					path = norm[:slash+i]
				}
				n.why, n.checked = "no package "+path+" in the program", true
			} else {
				n.rest = strings.Split(norm[len(n.pkg.ImportPath)+1:], ".")
			}
			c.names = append(c.names, n)
		}
	}
	return c
}

// root checks the names in pkg, a named package just type-checked.
func (c *nameCheck) root(pkg *types.Package) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.names {
		if !n.checked && n.pkg.ImportPath == pkg.Path() {
			n.why, n.checked = n.lookup(pkg), true
		}
	}
}

// warn checks the remaining names against export data and prints a
// warning for each name that matches nothing.
func (c *nameCheck) warn(w io.Writer) {
	exports := map[*listed]*types.Package{}
	for _, n := range c.names {
		if !n.checked {
			pkg, ok := exports[n.pkg]
			if !ok {
				pkg = readExport(n.pkg)
				exports[n.pkg] = pkg
			}
			if pkg != nil {
				n.why = n.lookup(pkg)
			}
		}
		if n.why != "" {
			fmt.Fprintf(w, "idemlint: warning: %s: %q matches nothing: %s\n", n.key, n.name, n.why)
		}
	}
}

// lookup says why the name matches nothing in pkg, or returns "".
func (n *configName) lookup(pkg *types.Package) string {
	obj := pkg.Scope().Lookup(n.rest[0])
	switch {
	case len(n.rest) > 2:
		return "not a function or type name"
	case n.isType || len(n.rest) == 2:
		tn, ok := obj.(*types.TypeName)
		if !ok {
			return fmt.Sprintf("%s has no type %s", pkg.Path(), n.rest[0])
		}
		if len(n.rest) == 2 {
			if m, _, _ := types.LookupFieldOrMethod(tn.Type(), true, pkg, n.rest[1]); m == nil {
				return fmt.Sprintf("type %s.%s has no method %s", pkg.Path(), n.rest[0], n.rest[1])
			}
		}
	default:
		if _, ok := obj.(*types.Func); !ok {
			return fmt.Sprintf("%s has no function %s", pkg.Path(), n.rest[0])
		}
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
