package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/facts"
)

// depCache keeps, between the language server's runs over one directory,
// what the first pass learned about the packages whose inputs did not
// change: a package is kept when its own inputs (see inputSum: its files'
// contents, its export data, its imports) and those of every package it
// imports, directly or not, are the same as in the run before, and it
// was analyzed without failure then. Its first-pass facts depend only on
// its own code and its imports' facts (the first pass asks nothing of the
// whole-program facts), so they are given again, and so are the findings
// the first pass reported on it; its contributions to the kept
// facts.Program (named types, method summaries, interface calls) stay.
// Every other package's contributions are forgotten (facts.Program.Forget)
// and made again. After a save in a leaf package, the first pass then
// analyzes that package alone; the second pass runs as the command's.
// On pocketbase the dependencies were 27% of a run's CPU and the module's
// own first pass 17%.
type depCache struct {
	key      [32]byte // the settings, patterns and tests it was made with
	prog     *facts.Program
	sums     map[string][sha256.Size]byte // package ID -> inputSum, of the last run
	reusable map[string]bool              // package IDs whose first pass is kept
	paths    []string                     // package paths of the last run
	facts    map[factKey]analysis.Fact
	pkgFacts map[pkgFactKey]analysis.Fact
	diags    []finding // the first pass's findings on the reusable packages
	// reused are the packages the last run skipped in its first pass, by
	// ID (the server's log and the tests).
	reused map[string]bool

	// forgot are the package paths this run forgot in prog, and before
	// the digest of their contributions before (see reuse2).
	forgot []string
	before [sha256.Size]byte
	// The second pass of the last run: the packages it analyzed without
	// failure, by ID, and their facts and findings after it.
	pass2     map[string]bool
	facts2    map[factKey]analysis.Fact
	pkgFacts2 map[pkgFactKey]analysis.Fact
	diags2    []finding
	// reused2 are the packages the last run skipped in its second pass.
	reused2 map[string]bool
}

// stable reports whether l's code cannot change under the server: the
// standard library or the module cache.
func stable(l *listed, modCache string) bool {
	return l.Standard || modCache != "" && strings.HasPrefix(l.Dir, modCache+string(filepath.Separator))
}

// inputSum hashes what a package's first pass reads of its own: its ID,
// directory, module, export data, imports, load errors, file names and,
// outside the module cache and the standard library, the files' contents
// (a module-cache directory is named by its version and never changes).
// A file that cannot be read is hashed as its error.
func inputSum(p *listed, modCache string) [sha256.Size]byte {
	h := sha256.New()
	imports := make([]string, 0, len(p.ImportMap))
	for k, v := range p.ImportMap {
		imports = append(imports, k+"="+v)
	}
	sort.Strings(imports)
	var mod any
	if p.Module != nil {
		mod = *p.Module
	}
	// Errors cannot happen: every value is a string, a slice of strings
	// or a struct of them.
	_ = json.NewEncoder(h).Encode([]any{p.ImportPath, p.Dir, mod, p.Export, imports, p.Deps, p.DepOnly, p.Standard, p.Error, p.DepsErrors, p.CompiledGoFiles})
	if !stable(p, modCache) {
		for _, name := range p.CompiledGoFiles {
			if !filepath.IsAbs(name) {
				name = filepath.Join(p.Dir, name)
			}
			data, err := os.ReadFile(name)
			if err != nil {
				data = []byte(err.Error())
			}
			fmt.Fprintf(h, "%s %d\n", name, len(data))
			h.Write(data)
		}
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// reuse returns the package IDs of pkgs whose first pass c keeps and may
// give again: analyzed without failure last time, with their own inputs
// and every import's the same as then, and so are those of every other
// package of the same path (a package and its test variant contribute to
// the Program under one path). It forgets, in c.prog, every other
// package of this run and the last one, and fills d with the facts and
// first-pass findings it keeps. sums are the inputSums of pkgs.
func (c *depCache) reuse(pkgs []*listed, sums map[string][sha256.Size]byte, d *unitDriver) map[string]bool {
	clean := map[string]bool{}
	for _, p := range pkgs {
		if !c.reusable[p.ImportPath] || c.sums[p.ImportPath] != sums[p.ImportPath] {
			continue
		}
		ok := true
		for _, dep := range p.Deps {
			if s, had := c.sums[dep]; !had || s != sums[dep] { // unsafe has none: both zero
				ok = false
				break
			}
		}
		clean[p.ImportPath] = ok
	}
	// A path is kept only if every package with it, in this run and the
	// last, is.
	keptPath := map[string]bool{}
	for _, p := range pkgs {
		if _, seen := keptPath[p.path()]; !seen {
			keptPath[p.path()] = true
		}
		keptPath[p.path()] = keptPath[p.path()] && clean[p.ImportPath]
	}
	for id := range c.sums {
		if _, now := sums[id]; !now {
			keptPath[pathOf(id)] = false
		}
	}
	out := map[string]bool{}
	for id := range clean {
		if clean[id] && keptPath[pathOf(id)] {
			out[id] = true
		}
	}
	var forget []string
	for _, path := range c.paths {
		if !keptPath[path] {
			forget = append(forget, path)
		}
	}
	for path, kept := range keptPath {
		if !kept {
			forget = append(forget, path)
		}
	}
	c.forgot = forget
	c.before = c.prog.Digest(forget...)
	c.prog.Forget(forget...)
	c.reused = out
	for k, v := range c.facts {
		if out[k.pkg] {
			d.facts.Store(k, v)
		}
	}
	for k, v := range c.pkgFacts {
		if out[k.pkg] {
			d.pkgFacts.Store(k, v)
		}
	}
	for _, f := range c.diags {
		if out[f.id] {
			d.diags = append(d.diags, f)
		}
	}
	return out
}

// pathOf is the package path of a package ID: "p" for "p [p.test]".
func pathOf(id string) string {
	if i := strings.Index(id, " ["); i >= 0 {
		return id[:i]
	}
	return id
}

// keep records, after the first pass, the facts and first-pass findings
// of the packages that were analyzed without failure (or that are not
// analyzed at all), and every package's inputSum, for the next run.
func (c *depCache) keep(pkgs []*listed, sums map[string][sha256.Size]byte, d *unitDriver) {
	c.sums = sums
	c.reusable = map[string]bool{}
	c.paths = c.paths[:0]
	for _, p := range pkgs {
		c.paths = append(c.paths, p.path())
		if !d.failed[p.ImportPath] && !p.broken() {
			c.reusable[p.ImportPath] = true
		}
	}
	c.facts = map[factKey]analysis.Fact{}
	c.pkgFacts = map[pkgFactKey]analysis.Fact{}
	d.facts.Range(func(k, v any) bool {
		if fk := k.(factKey); c.reusable[fk.pkg] {
			c.facts[fk] = v.(analysis.Fact)
		}
		return true
	})
	d.pkgFacts.Range(func(k, v any) bool {
		if pk := k.(pkgFactKey); c.reusable[pk.pkg] {
			c.pkgFacts[pk] = v.(analysis.Fact)
		}
		return true
	})
	c.diags = c.diags[:0]
	for _, f := range d.diags {
		if c.reusable[f.id] {
			c.diags = append(c.diags, f)
		}
	}
}

// reuse2 returns the packages of again (those the second pass analyzes)
// whose second pass c keeps and gives again, and fills d with their
// facts and findings after it: packages whose first pass was kept (their
// inputs and their imports' are the same), that the last second pass
// analyzed without failure, while the packages analyzed again in the first
// pass contributed to the Program exactly what they had contributed before
// (facts.Program.Digest): every interface call then resolves as it did.
// Otherwise it keeps none.
func (c *depCache) reuse2(again map[string]bool, d *unitDriver) map[string]bool {
	out := map[string]bool{}
	if c.pass2 != nil && c.prog.Digest(c.forgot...) == c.before {
		for id, ok := range again {
			if ok && c.reused[id] && c.pass2[id] {
				out[id] = true
			}
		}
		// An import analyzed again in the second pass (it failed last
		// time) is analyzed again in its importers too.
		for _, p := range d.pkgs {
			for _, dep := range p.Deps {
				if out[p.ImportPath] && again[dep] && !out[dep] {
					delete(out, p.ImportPath)
				}
			}
		}
	}
	c.reused2 = out
	for k, v := range c.facts2 {
		if out[k.pkg] {
			d.facts.Store(k, v)
		}
	}
	for k, v := range c.pkgFacts2 {
		if out[k.pkg] {
			d.pkgFacts.Store(k, v)
		}
	}
	for _, f := range c.diags2 {
		if out[f.id] {
			d.diags = append(d.diags, f)
		}
	}
	return out
}

// keep2 records, after the second pass, the facts and findings of the
// packages of again that it analyzed (or that reuse2 kept) without
// failure.
func (c *depCache) keep2(again map[string]bool, d *unitDriver) {
	c.pass2 = map[string]bool{}
	for id, ok := range again {
		if ok && !d.failed[id] {
			c.pass2[id] = true
		}
	}
	c.facts2 = map[factKey]analysis.Fact{}
	c.pkgFacts2 = map[pkgFactKey]analysis.Fact{}
	d.facts.Range(func(k, v any) bool {
		if fk := k.(factKey); c.pass2[fk.pkg] {
			c.facts2[fk] = v.(analysis.Fact)
		}
		return true
	})
	d.pkgFacts.Range(func(k, v any) bool {
		if pk := k.(pkgFactKey); c.pass2[pk.pkg] {
			c.pkgFacts2[pk] = v.(analysis.Fact)
		}
		return true
	})
	c.diags2 = c.diags2[:0]
	for _, f := range d.diags {
		if c.pass2[f.id] {
			c.diags2 = append(c.diags2, f)
		}
	}
}
