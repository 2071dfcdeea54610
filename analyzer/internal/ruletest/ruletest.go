// Package ruletest runs a rule's analyzer as a real command for its
// tests: the test binary doubles as a multichecker (as cmd/idemlint is), so
// a test can check exit codes, -json output against a golden file, and
// go vet -vettool, on packages of the analyzers' shared testdata GOPATH
// (analyzer/testdata: the library stubs once, the cases of every rule).
// A rule's own testdata directory holds only its golden files.
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
	"golang.org/x/tools/go/analysis/analysistest"
	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/idemkit/idem/internal/testenv"
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

// Testdata is the GOPATH shared by the analyzers' tests, analyzer/testdata,
// as seen from a rule's package directory (where go test runs its tests).
func Testdata() string {
	return filepath.Join(analysistest.TestData(), "..", "..", "testdata")
}

// Run runs the checker (this test binary) with args in GOPATH mode on the
// shared GOPATH and returns its output and exit code.
func Run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return run(t, Testdata(), os.Args[0], args...)
}

// Vet runs go vet -vettool=<this test binary> with args in GOPATH mode on
// the shared GOPATH.
func Vet(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	_, stderr, code = run(t, Testdata(), "go", append([]string{"vet", "-vettool=" + os.Args[0]}, args...)...)
	return stderr, code
}

func run(t *testing.T, testdata, name string, args ...string) (string, string, int) {
	abs, err := filepath.Abs(testdata)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(abs, "src")
	cmd.Env = append(os.Environ(), env+"=1", "GOPATH="+abs, "GO111MODULE=off", "GOFLAGS="+testenv.ChildGoFlags(), "GOWORK=off", "GOTOOLCHAIN=local")
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

// CheckFindings checks the findings of an analysistest run: at least min
// of them (directive diagnostics aside), each with an End past its Pos
// and related positions that are valid and elsewhere.
func CheckFindings(t *testing.T, results []*analysistest.Result, min int) {
	t.Helper()
	n := 0
	for _, r := range results {
		for _, d := range r.Diagnostics {
			if strings.HasPrefix(d.Message, "idemlint:ignore") {
				continue
			}
			n++
			if d.End <= d.Pos || len(d.Related) == 0 {
				t.Errorf("%v: End %v, related %v", r.Pass.Fset.Position(d.Pos), d.End, d.Related)
			}
			for _, rel := range d.Related {
				if !rel.Pos.IsValid() || rel.Pos == d.Pos {
					t.Errorf("%v: bad related position %+v", r.Pass.Fset.Position(d.Pos), rel)
				}
			}
		}
	}
	if n < min {
		t.Errorf("%d findings, want at least %d", n, min)
	}
}

// EndToEnd runs the rule as a command on the shared testdata packages
// e2e/<rule>/bad (exit 3 and want in the output; exit 0 with -<rule>=false)
// and e2e/<rule>/good (nothing printed), directly and under go vet
// -vettool. The second argument, the rule's own testdata directory, is not
// read: the cases live in the shared GOPATH.
//
// One process checks both packages (each run loads their dependencies
// from source): its exit code is bad's, and every line it prints must be
// about bad's files, so a finding, a type error or a crash in good fails
// the test as good's own run did.
func EndToEnd(t *testing.T, _, rule, want string) {
	t.Helper()
	bad, good := "e2e/"+rule+"/bad", "e2e/"+rule+"/good"
	abs, err := filepath.Abs(Testdata())
	if err != nil {
		t.Fatal(err)
	}
	badDir := filepath.Join(abs, "src", filepath.FromSlash(bad)) + string(filepath.Separator)
	_, stderr, code := Run(t, bad, good)
	if code != 3 || !strings.Contains(stderr, want) {
		t.Errorf("bad: exit %d, want 3 and %q; stderr:\n%s", code, want, stderr)
	}
	if l, ok := foreignLine(stderr, badDir); ok {
		t.Errorf("good: printed %q; stderr:\n%s", l, stderr)
	}
	if _, stderr, code = Run(t, "-"+rule+"=false", bad); code != 0 {
		t.Errorf("-%s=false: exit %d, stderr:\n%s", rule, code, stderr)
	}
	msg := want[strings.Index(want, ": ")+2:]
	stderr, code = Vet(t, bad, good)
	if code == 0 || !strings.Contains(stderr, msg) {
		t.Errorf("go vet -vettool: exit %d, stderr:\n%s", code, stderr)
	}
	// go vet names files relative to its directory (the GOPATH's src) and
	// may head a package's output with "# <package>".
	if l, ok := foreignLine(strings.ReplaceAll(stderr, "# "+bad+"\n", ""), bad+"/"); ok {
		t.Errorf("go vet -vettool on good: printed %q; stderr:\n%s", l, stderr)
	}
}

// foreignLine returns the first non-empty line of out that does not begin
// with prefix, related positions aside (a finding's "pos: \tmessage" lines
// after it, which may be in other packages).
func foreignLine(out, prefix string) (string, bool) {
	for l := range strings.Lines(out) {
		if l = strings.TrimRight(l, "\n"); l != "" && !strings.HasPrefix(l, prefix) && !strings.Contains(l, ": \t") {
			return l, true
		}
	}
	return "", false
}

// JSON compares the -json output of the rule on pkgs (after flags) of the
// shared GOPATH with the golden file json.golden of the rule's own testdata
// directory.
func JSON(t *testing.T, testdata string, args ...string) {
	t.Helper()
	stdout, stderr, code := Run(t, append([]string{"-json"}, args...)...)
	if code != 0 {
		t.Fatalf("-json: exit %d, stderr:\n%s", code, stderr)
	}
	Golden(t, Testdata(), filepath.Join(testdata, "json.golden"), stdout)
}
