package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []mutant
		err        string
	}{{
		name: "fields, comments and escapes",
		text: "# a comment\n\nname: a\nfile: x.go\n# inside a block\nfrom: if a {\\n\\treturn \\\\n\nto: if !a {\\n\\treturn\npkgs: ./x/ ./y/\nrun: ^TestA$\n\n\nname: b\nfile: y.go\nfrom: < \nto: <= \npkgs: ./y/\n",
		want: []mutant{
			{Name: "a", File: "x.go", From: "if a {\n\treturn \\n", To: "if !a {\n\treturn", Pkgs: []string{"./x/", "./y/"}, Run: "^TestA$", Line: 3},
			{Name: "b", File: "y.go", From: "< ", To: "<= ", Pkgs: []string{"./y/"}, Line: 12},
		},
	}, {
		name: "missing pkgs",
		text: "name: a\nfile: x.go\nfrom: a\nto: b\n",
		err:  "list.txt:1: a mutant needs name, file, from and pkgs",
	}, {
		name: "changes nothing",
		text: "\nname: a\nfile: x.go\nfrom: a\nto: a\npkgs: ./x/\n",
		err:  "list.txt:2: mutant a changes nothing",
	}, {
		name: "duplicate name",
		text: "name: a\nfile: x.go\nfrom: a\nto: b\npkgs: ./x/\n\nname: a\nfile: x.go\nfrom: c\nto: d\npkgs: ./x/\n",
		err:  "list.txt:7: mutant a already named at line 1",
	}, {
		name: "unknown field",
		text: "name: a\nfiles: x.go\n",
		err:  `list.txt:2: unknown field "files"`,
	}, {
		name: "no colon",
		text: "name: a\nfile x.go\n",
		err:  `list.txt:2: want "field: value"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseList("list.txt", tc.text)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d mutants, want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Name != w.Name || g.File != w.File || g.From != w.From || g.To != w.To || g.Run != w.Run || g.Line != w.Line ||
					strings.Join(g.Pkgs, " ") != strings.Join(w.Pkgs, " ") {
					t.Errorf("mutant %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// tinyList is a list of mutants of testdata/tiny: one its tests kill, one
// they miss, and three that prove nothing (text not found, a package that
// does not build, tests that do not build).
const tinyList = `name: max-flipped
file: testdata/tiny/tiny.go
from: if a > b {
to: if a < b {
pkgs: ./testdata/tiny/

name: abs-boundary
file: testdata/tiny/tiny.go
from: if x < 0 {
to: if x < -1 {
pkgs: ./testdata/tiny/

name: not-there
file: testdata/tiny/tiny.go
from: if a >= b {
to: if a > b {
pkgs: ./testdata/tiny/

name: unused-variable
file: testdata/tiny/tiny.go
from: return -x
to: y := -x\n\t\treturn x
pkgs: ./testdata/tiny/

name: renamed
file: testdata/tiny/tiny.go
from: func Abs(x int) int {
to: func Abs2(x int) int {
pkgs: ./testdata/tiny/
`

// runTiny runs the tool on list with args and returns its exit code, its
// output and the report it wrote.
func runTiny(t *testing.T, list string, args ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	path, report := filepath.Join(dir, "list.txt"), filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"-list", path, "-report", report}, args...), &stdout, &stderr)
	text, _ := os.ReadFile(report)
	t.Logf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	return code, stdout.String(), string(text)
}

// status returns the status and the detail the tool printed for mutant name.
func status(out, name string) (string, string) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[1] == name {
			_, detail, _ := strings.Cut(l, "s  ")
			return f[0], detail
		}
	}
	return "", ""
}

func TestRunTiny(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/tiny/tiny.go")
	if err != nil {
		t.Fatal(err)
	}
	code, out, report := runTiny(t, tinyList)
	if code != 1 {
		t.Errorf("exit code %d, want 1 (not every mutant killed)", code)
	}
	for _, want := range []struct{ name, status, detail string }{
		{"max-flipped", "killed", "TestMax: tiny_test.go:"},
		{"abs-boundary", "SURVIVED", ""},
		{"not-there", "invalid", `"if a >= b {" occurs 0 times in testdata/tiny/tiny.go, want once`},
		{"unused-variable", "invalid", "does not build: testdata/tiny/tiny.go:16:3: declared and not used: y"},
		{"renamed", "invalid", "tests do not build: "},
	} {
		st, detail := status(out, want.name)
		if st != want.status || !strings.Contains(detail, want.detail) {
			t.Errorf("%s: %s %q, want %s with %q", want.name, st, detail, want.status, want.detail)
		}
	}
	if !strings.HasPrefix(report, "1 of 5 mutants killed.") || !strings.Contains(report, "| max-flipped | testdata/tiny/tiny.go | killed | TestMax: ") {
		t.Errorf("report:\n%s", report)
	}
	if now, _ := os.ReadFile("testdata/tiny/tiny.go"); !bytes.Equal(now, src) {
		t.Error("the work tree changed")
	}
}

func TestCheckTiny(t *testing.T) {
	t.Parallel()
	code, out, report := runTiny(t, tinyList+"\nname: no-package\nfile: testdata/tiny/tiny.go\nfrom: return b\nto: return a\npkgs: ./testdata/none/\n", "-check")
	if code != 1 {
		t.Errorf("exit code %d, want 1 (invalid mutants)", code)
	}
	for name, want := range map[string]string{
		"max-flipped": "applies", "abs-boundary": "applies", "renamed": "applies", // -check builds no test
		"not-there": "invalid", "unused-variable": "invalid", "no-package": "invalid",
	} {
		if st, _ := status(out, name); st != want {
			t.Errorf("%s: %s, want %s", name, st, want)
		}
	}
	if _, detail := status(out, "no-package"); !strings.Contains(detail, "package ./testdata/none/") {
		t.Errorf("no-package: %q, want the missing package named", detail)
	}
	if !strings.HasPrefix(report, "3 of 6 mutants apply and type-check.") {
		t.Errorf("report:\n%s", report)
	}
}

// TestFlakyKill: a test that fails without the mutant does not kill it.
func TestFlakyKill(t *testing.T) {
	t.Setenv("MUTANTS_TINY_FAIL", "1") // testdata/tiny's TestFails fails with it set
	code, out, _ := runTiny(t, "name: comment\nfile: testdata/tiny/tiny.go\nfrom: // Max returns\nto: // Max gives\npkgs: ./testdata/tiny/\n")
	if st, detail := status(out, "comment"); code != 1 || st != "flaky" || !strings.Contains(detail, "TestFails fails without the mutant too") {
		t.Errorf("exit %d, %s %q; want flaky", code, st, detail)
	}
}

// TestWholeIgnoresRun: a filter that leaves out the killing test lets the
// mutant survive; -whole runs the package whole and kills it.
func TestWholeIgnoresRun(t *testing.T) {
	t.Parallel()
	list := "name: max-flipped\nfile: testdata/tiny/tiny.go\nfrom: if a > b {\nto: if a < b {\npkgs: ./testdata/tiny/\nrun: ^TestAbs$\n"
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "SURVIVED"}, {[]string{"-whole"}, "killed"}} {
		if _, out, _ := runTiny(t, list, tc.args...); !strings.HasPrefix(out, tc.want+" ") {
			t.Errorf("%v: %q, want %s", tc.args, out, tc.want)
		}
	}
}

func TestFailingTests(t *testing.T) {
	out := "--- FAIL: TestA (0.10s)\n    a_test.go:9: flaky timer\n--- FAIL: TestB (1.00s)\n    --- FAIL: TestB/sub_one (0.50s)\n        b_test.go:20: got 1, want 2\nFAIL\nFAIL\texample.com/p\t1.2s\n--- FAIL: TestC (0.01s)\nFAIL\nFAIL\texample.com/q\t0.1s\n"
	want := []failure{
		{"example.com/p", "TestA", "a_test.go:9: flaky timer"},
		{"example.com/p", "TestB/sub_one", "b_test.go:20: got 1, want 2"},
		{"example.com/q", "TestC", ""},
	}
	got := failingTests(out)
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("failure %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if p := runPattern("TestB/sub_one"); p != "^TestB$/^sub_one$" {
		t.Errorf("runPattern = %q", p)
	}
}
