// Package ruletest runs a rule's analyzer as a real command for its
// tests: the test binary doubles as a multichecker (as cmd/idemlint is), so
// a test can check exit codes, -json output against a golden file, and
// go vet -vettool, on packages of the rule's testdata GOPATH.
package ruletest

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/multichecker"
)

const env = "IDEMLINT_RULETEST_CHECKER"

var update = flag.Bool("update", false, "rewrite the -json golden files")

// Main is the TestMain of a rule's tests: run as a checker of analyzers
// when the test re-executes itself, the tests otherwise.
func Main(m *testing.M, analyzers ...*analysis.Analyzer) {
	if os.Getenv(env) == "1" {
		multichecker.Main(analyzers...)
		return
	}
	os.Exit(m.Run())
}

// Run runs the checker (this test binary) with args in GOPATH mode on the
// GOPATH testdata and returns its output and exit code.
func Run(t *testing.T, testdata string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return run(t, testdata, os.Args[0], args...)
}

// Vet runs go vet -vettool=<this test binary> with args in GOPATH mode.
func Vet(t *testing.T, testdata string, args ...string) (stderr string, code int) {
	t.Helper()
	_, stderr, code = run(t, testdata, "go", append([]string{"vet", "-vettool=" + os.Args[0]}, args...)...)
	return stderr, code
}

func run(t *testing.T, testdata, name string, args ...string) (string, string, int) {
	abs, err := filepath.Abs(testdata)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(abs, "src")
	cmd.Env = append(os.Environ(), env+"=1", "GOPATH="+abs, "GO111MODULE=off", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return o.String(), e.String(), code
}

// Golden compares got, with the absolute testdata path replaced by
// TESTDATA, to the file golden (rewritten with -update).
func Golden(t *testing.T, testdata, golden, got string) {
	t.Helper()
	abs, err := filepath.Abs(testdata)
	if err != nil {
		t.Fatal(err)
	}
	got = strings.ReplaceAll(got, abs, "TESTDATA")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("-json output differs from %s (run with -update to accept):\n%s", golden, got)
	}
}
