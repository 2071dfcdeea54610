package main

import (
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/facts"
)

// depCache keeps, between the language server's runs over one directory,
// what the first pass learned about the dependencies that cannot change:
// packages of the module cache whose export data, and that of everything
// they import, is the same file as in the run before. Their first-pass
// facts depend only on their own code and their imports' facts (the first
// pass asks nothing of the whole-program facts), and their method
// summaries stay in the kept facts.Program; every other package's
// contributions to it are forgotten (facts.Program.Forget) and made again.
// On pocketbase the dependencies were 27% of a run's CPU.
type depCache struct {
	key      [32]byte // the settings, patterns and tests it was made with
	prog     *facts.Program
	exports  map[string]string // package ID -> export file, of the last run
	reusable map[string]bool   // package IDs whose facts are kept
	paths    []string          // package paths of the last run
	facts    map[factKey]analysis.Fact
	pkgFacts map[pkgFactKey]analysis.Fact
	// reused are the packages the last run skipped, by ID (the server's
	// log and the tests).
	reused map[string]bool
}

// stable reports whether l's code cannot change under the server: the
// standard library or the module cache.
func stable(l *listed, modCache string) bool {
	return l.Standard || modCache != "" && strings.HasPrefix(l.Dir, modCache+string(filepath.Separator))
}

// reuse returns the package IDs of pkgs whose first-pass facts c holds and
// may give again: dependencies in the module cache, analyzed without
// failure last time, whose export data and whose every import's are the
// same files as then. It forgets, in c.prog, every other package of this
// run and the last one, and fills d with the facts it keeps.
func (c *depCache) reuse(pkgs []*listed, d *unitDriver) map[string]bool {
	out := map[string]bool{}
	for _, p := range pkgs {
		if !c.reusable[p.ImportPath] || !p.DepOnly || c.exports[p.ImportPath] != p.Export || p.Export == "" {
			continue
		}
		ok := true
		for _, dep := range p.Deps {
			if l := d.byID[dep]; l == nil || c.exports[dep] != l.Export { // unsafe has none
				ok = false
				break
			}
		}
		if ok {
			out[p.ImportPath] = true
		}
	}
	keptPath := map[string]bool{}
	for id := range out {
		keptPath[d.byID[id].path()] = true
	}
	var forget []string
	for _, path := range c.paths {
		if !keptPath[path] {
			forget = append(forget, path)
		}
	}
	for _, p := range pkgs {
		if !keptPath[p.path()] {
			forget = append(forget, p.path())
		}
	}
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
	return out
}

// keep records, after the first pass, the facts of the dependencies in the
// module cache that were analyzed without failure, and the export files
// of every package, for the next run.
func (c *depCache) keep(pkgs []*listed, d *unitDriver, modCache string) {
	c.exports = map[string]string{}
	c.reusable = map[string]bool{}
	c.paths = c.paths[:0]
	for _, p := range pkgs {
		c.exports[p.ImportPath] = p.Export
		c.paths = append(c.paths, p.path())
		if p.DepOnly && stable(p, modCache) && !d.failed[p.ImportPath] && !p.broken() {
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
}
