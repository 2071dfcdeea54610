package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/generator"
	"github.com/idemkit/idem/internal/version"
	"github.com/idemkit/idem/templates"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // problems in the source, or generated files out of date
	exitUsage = 2
)

const usage = `usage: idemgen [flags] [packages]
       idemgen schema

idemgen turns //idem:service interfaces into idempotent wrappers: for each
interface X it writes x_idem.go with NewIdempotentX(inner X, rt *runtime.Runtime) X.
Packages are go command patterns; the default is the package in the current
directory (under go generate: the package of $GOFILE).

idemgen schema prints the SQL migration of the record table (PostgreSQL).

Examples:
  //go:generate go run github.com/idemkit/idem/cmd/idemgen
  idemgen ./...                   generate for every package below here
  idemgen -check ./...            exit 1 if a generated file is out of date (CI)
  idemgen schema > migrations/001_idem.sql

Flags:
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "schema" {
		if len(args) > 1 {
			fmt.Fprintln(stderr, "idemgen schema takes no arguments")
			return exitUsage
		}
		sql, err := templates.Migration("idemgen " + versionString())
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitError
		}
		_, _ = io.WriteString(stdout, sql)
		return exitOK
	}
	fs := flag.NewFlagSet("idemgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "write nothing; exit 1 and list the generated files that are out of date")
	tags := fs.String("tags", "", "comma-separated extra build tags to load the packages with")
	verbose := fs.Bool("v", false, "list the files written and the time spent loading, checking and emitting")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			// Asked for: usage to stdout, success.
			fs.SetOutput(stdout)
			fs.Usage()
			return exitOK
		}
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, "idemgen", versionString())
		return exitOK
	}
	cfg := generator.Config{Patterns: fs.Args()}
	if *tags != "" {
		cfg.Tags = strings.Split(*tags, ",")
	}
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitError
	}
	res, err := generator.Generate(cfg)
	if err != nil {
		var list generator.ErrorList
		if errors.As(err, &list) {
			for _, e := range list.Relative(cwd) {
				fmt.Fprintln(stderr, e.Error())
			}
			fmt.Fprintf(stderr, "idemgen: %d %s; nothing was written\n", len(list), plural(len(list), "error", "errors"))
			return exitError
		}
		fmt.Fprintln(stderr, err)
		return exitError
	}
	if *check {
		return checkFiles(res, cwd, stdout, stderr)
	}
	if err := write(res, cwd, *verbose, stdout); err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitError
	}
	if *verbose {
		t := res.Timing
		fmt.Fprintf(stdout, "idemgen: %d services; load %v, check %v, emit %v\n", len(res.Services), t.Load, t.Check, t.Emit)
	}
	return exitOK
}

func rel(cwd, path string) string {
	if r, err := filepath.Rel(cwd, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// write writes the files that changed and removes stale ones.
func write(res *generator.Result, cwd string, verbose bool, stdout io.Writer) error {
	for _, f := range res.Files {
		old, err := os.ReadFile(f.Path)
		if err == nil && bytes.Equal(old, f.Content) {
			continue
		}
		tmp := f.Path + ".idemgen.tmp"
		if err := os.WriteFile(tmp, f.Content, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, f.Path); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		if verbose {
			fmt.Fprintln(stdout, "wrote", rel(cwd, f.Path))
		}
	}
	for _, path := range res.Stale {
		if err := os.Remove(path); err != nil {
			return err
		}
		if verbose {
			fmt.Fprintln(stdout, "removed", rel(cwd, path), "(no //idem:service generates it any more)")
		}
	}
	return nil
}

// checkFiles reports generated files that differ from what idemgen would
// write now.
func checkFiles(res *generator.Result, cwd string, stdout, stderr io.Writer) int {
	var bad []string
	for _, f := range res.Files {
		old, err := os.ReadFile(f.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			bad = append(bad, rel(cwd, f.Path)+": missing")
		case err != nil:
			bad = append(bad, rel(cwd, f.Path)+": "+err.Error())
		case !bytes.Equal(old, f.Content):
			bad = append(bad, rel(cwd, f.Path)+": out of date")
		}
	}
	for _, path := range res.Stale {
		bad = append(bad, rel(cwd, path)+": stale (no //idem:service generates it any more)")
	}
	if len(bad) == 0 {
		return exitOK
	}
	for _, b := range bad {
		fmt.Fprintln(stdout, b)
	}
	fmt.Fprintf(stderr, "idemgen: %d generated %s out of date; run go generate\n", len(bad), plural(len(bad), "file is", "files are"))
	return exitError
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// versionString is the idem version idemgen was built from (see
// internal/version): "v0.4.0 go1.26.8" when installed or required at v0.4.0.
func versionString() string { return version.Read().String() }
