// Package plugin registers idemlint as a golangci-lint v2 module plugin:
//
//	# .custom-gcl.yml
//	version: v2.5.0
//	plugins:
//	  - module: github.com/idemkit/idem
//	    import: github.com/idemkit/idem/analyzer/plugin
//	    version: v0.1.0
//
// and in .golangci.yml, linters.settings.custom.idemlint with
// type: module and settings (see analyzer.Settings: disable, netfuncs,
// txrunners, tables, columns).
package plugin

import (
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer"
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

// BuildAnalyzers returns the enabled rules.
func (p *plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) { return analyzer.New(p.settings) }

// GetLoadMode: the rules need type information (and build SSA).
func (p *plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
