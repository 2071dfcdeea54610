package generator

import (
	"fmt"
	"strings"

	"golang.org/x/tools/go/packages"
)

// BuildTag is the build constraint idemgen loads packages with. Generated
// files carry "//go:build !idemgen", so a stale or broken generated file
// never takes part in loading the package it is regenerated for.
const BuildTag = "idemgen"

// Config says what to load.
type Config struct {
	// Dir is the directory patterns are resolved in ("" is the current
	// directory).
	Dir string
	// Patterns are package patterns as the go command takes them; none
	// means ".".
	Patterns []string
	// Tags are extra build tags (BuildTag is always set).
	Tags []string
	// Env is the environment of the go command (nil: the process's).
	Env []string
}

const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
	packages.NeedTypes | packages.NeedTypesInfo | packages.NeedModule

// Load loads the packages of cfg, once, with go/packages: syntax and types
// of the packages themselves, export data of their dependencies.
func Load(cfg Config) ([]*packages.Package, error) {
	patterns := cfg.Patterns
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	tags := append([]string{BuildTag}, cfg.Tags...)
	pcfg := &packages.Config{
		Mode:       loadMode,
		Dir:        cfg.Dir,
		Env:        cfg.Env,
		BuildFlags: []string{"-tags=" + strings.Join(tags, ",")},
	}
	pkgs, err := packages.Load(pcfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("idemgen: loading %s: %w", strings.Join(patterns, " "), err)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("idemgen: no packages match %s", strings.Join(patterns, " "))
	}
	return pkgs, nil
}
