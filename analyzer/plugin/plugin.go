// Package plugin registers idemlint as a golangci-lint v2 module plugin:
//
//	# .custom-gcl.yml
//	version: v2.15.0
//	plugins:
//	  - module: github.com/idemkit/idem
//	    import: github.com/idemkit/idem/analyzer/plugin
//	    path: ../idem
//
// and in .golangci.yml, linters.settings.custom.idemlint with
// type: module and settings (see analyzer.Settings: disable, netfuncs,
// txrunners, tables, txtypes, failfuncs, tokendels, columns; the keys of
// .idemlint.json).
package plugin

import (
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer"
	"github.com/idemkit/idem/analyzer/facts"
)

func init() {
	register.Plugin("idemlint", New)
}

// New decodes the plugin settings.
func New(settings any) (register.LinterPlugin, error) {
	s, err := register.DecodeSettings[analyzer.Settings](settings)
	if err != nil {
		return nil, err
	}
	if _, err := analyzer.New(s); err != nil { // report bad settings early
		return nil, err
	}
	return &plugin{settings: s}, nil
}

type plugin struct{ settings analyzer.Settings }

// BuildAnalyzers returns the enabled rules. Their diagnostics carry no
// related positions: golangci-lint would make each one an issue of its own
// ("rule(related information): ..."), counted against
// max-issues-per-linter, and every message already names its own position
// and those it relates to.
func (p *plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	as, _, err := analyzer.NewSuite(p.settings, facts.Config{NoRelated: true})
	if err != nil {
		return nil, err
	}
	for i, a := range as {
		as[i] = withoutRelated(a)
	}
	return as, nil
}

// withoutRelated returns a copy of the rule a whose diagnostics have their
// related positions dropped, whichever rule reports them. (A rule is no
// analyzer's requirement, so the copy replaces it safely.)
func withoutRelated(a *analysis.Analyzer) *analysis.Analyzer {
	b := *a
	b.Run = func(pass *analysis.Pass) (any, error) {
		report := pass.Report
		pass.Report = func(d analysis.Diagnostic) {
			d.Related = nil
			report(d)
		}
		return a.Run(pass)
	}
	return &b
}

// GetLoadMode: the rules need type information (and build SSA).
func (p *plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
