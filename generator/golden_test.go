package generator_test

import (
	"bytes"
	"flag"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/txtar"

	"github.com/idemkit/idem/generator"
	"github.com/idemkit/idem/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the expected output of the golden cases in testdata/cases")

// A golden case is one txtar archive in testdata/cases: the input files of a
// package, and either want/<file> sections (the generated files, byte for
// byte) or a want/errors section (every error, one "file:line:col: message"
// a line). The package of a success case must have a _test.go driver: the
// test compiles the generated code and runs the driver on the memory store.
type goldenCase struct {
	name    string
	path    string
	archive *txtar.Archive
	inputs  []txtar.File
	want    map[string][]byte // generated file base name -> content
	errors  []byte            // want/errors, nil for a success case
	dir     string            // in the scratch module
}

func (c *goldenCase) success() bool { return c.errors == nil }

func readCases(t *testing.T) []*goldenCase {
	t.Helper()
	paths, err := filepath.Glob("testdata/cases/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var cases []*goldenCase
	for _, p := range paths {
		a, err := txtar.ParseFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c := &goldenCase{name: strings.TrimSuffix(filepath.Base(p), ".txtar"), path: p, archive: a, want: map[string][]byte{}}
		for _, f := range a.Files {
			switch {
			case f.Name == "want/errors":
				c.errors = f.Data
			case strings.HasPrefix(f.Name, "want/"):
				c.want[strings.TrimPrefix(f.Name, "want/")] = f.Data
			default:
				c.inputs = append(c.inputs, f)
			}
		}
		cases = append(cases, c)
	}
	if len(cases) < 25 {
		t.Fatalf("only %d golden cases in testdata/cases; want at least 25", len(cases))
	}
	return cases
}

// scratchModule writes a module that requires the idem module from this
// repository and returns its directory and the environment of go commands
// in it. They use the module cache, and the module proxy for what a fresh
// cache lacks (the repository's own tests download only the modules their
// packages import, not every module of the graph).
func scratchModule(t testing.TB) (string, []string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/cases\n\ngo 1.26\n\nrequire github.com/idemkit/idem v0.0.0\n\nreplace github.com/idemkit/idem => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS="+testenv.ChildGoFlags("-mod=mod"), "GOWORK=off", "GOTOOLCHAIN=local")
	return dir, env
}

func writeFiles(t *testing.T, dir string, files []txtar.File) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGolden generates every case, compares the output with the archive,
// checks that generation is deterministic and gofmt-clean, and then
// compiles the generated code of the success cases and runs their drivers.
func TestGolden(t *testing.T) {
	cases := readCases(t)
	mod, env := scratchModule(t)
	var patterns []string
	for _, c := range cases {
		c.dir = filepath.Join(mod, "cases", c.name)
		writeFiles(t, c.dir, c.inputs)
		patterns = append(patterns, "./cases/"+c.name)
	}
	// One load for all cases, as idemgen loads its packages once.
	pkgs, err := generator.Load(generator.Config{Dir: mod, Patterns: patterns, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	byDir := map[string]*goldenCase{}
	for _, c := range cases {
		byDir[c.dir] = c
	}
	var runnable []string
	for _, pkg := range pkgs {
		var dir string
		for _, f := range append(append([]string{}, pkg.GoFiles...), pkg.IgnoredFiles...) {
			dir = filepath.Dir(f)
			break
		}
		if dir == "" {
			dir = filepath.Join(mod, strings.TrimPrefix(pkg.PkgPath, "example.com/cases/"))
		}
		c := byDir[dir]
		if c == nil {
			t.Fatalf("package %s (%s) is no case", pkg.PkgPath, dir)
		}
		delete(byDir, dir)
		t.Run(c.name, func(t *testing.T) {
			if checkCase(t, c, pkg) {
				runnable = append(runnable, "./cases/"+c.name)
			}
		})
	}
	for _, c := range byDir {
		t.Errorf("case %s was not loaded", c.name)
	}
	if t.Failed() || len(runnable) == 0 {
		return
	}
	t.Run("run", func(t *testing.T) {
		// Compile the generated code of every success case with its
		// driver and run the drivers, on the real runtime and memory store.
		cmd := exec.Command("go", append([]string{"test", "-count=1", "-vet=all"}, runnable...)...)
		cmd.Dir, cmd.Env = mod, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go test of the generated code failed: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), "\nok ") + boolInt(strings.HasPrefix(string(out), "ok ")); n != len(runnable) {
			t.Fatalf("%d of %d case packages passed:\n%s", n, len(runnable), out)
		}
		t.Logf("ran the drivers of %d success cases", len(runnable))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkCase generates one case and compares; it reports whether the case
// is a success case whose output is in place and ready to run.
func checkCase(t *testing.T, c *goldenCase, p *packages.Package) bool {
	t.Helper()
	res := &generator.Result{}
	err := generator.GeneratePackages([]*packages.Package{p}, res)
	if err != nil {
		list, ok := err.(generator.ErrorList)
		if !ok {
			t.Fatalf("generate: %v", err)
		}
		var got bytes.Buffer
		for _, e := range list.Relative(c.dir) {
			got.WriteString(e.Error())
			got.WriteByte('\n')
		}
		if len(res.Files) != 0 {
			t.Errorf("files were rendered although there are errors")
		}
		if *update {
			c.errors = got.Bytes()
			c.want = map[string][]byte{}
			rewrite(t, c)
			return false
		}
		if c.success() {
			t.Fatalf("unexpected errors:\n%s", got.Bytes())
		}
		if !bytes.Equal(got.Bytes(), c.errors) {
			t.Fatalf("errors differ\n--- got:\n%s--- want:\n%s", got.Bytes(), c.errors)
		}
		return false
	}
	got := map[string][]byte{}
	for _, f := range res.Files {
		if filepath.Dir(f.Path) != c.dir {
			t.Errorf("generated %s outside the package directory", f.Path)
		}
		got[filepath.Base(f.Path)] = f.Content
		if formatted, err := format.Source(f.Content); err != nil || !bytes.Equal(formatted, f.Content) {
			t.Errorf("%s is not gofmt-clean (err %v)", filepath.Base(f.Path), err)
		}
		if !generator.IsGenerated(f.Content) {
			t.Errorf("%s does not start with %q", filepath.Base(f.Path), generator.Header)
		}
	}
	// Determinism: a second run gives the same bytes.
	res2 := &generator.Result{}
	if err := generator.GeneratePackages([]*packages.Package{p}, res2); err != nil {
		t.Fatal(err)
	}
	for _, f := range res2.Files {
		if !bytes.Equal(f.Content, got[filepath.Base(f.Path)]) {
			t.Errorf("%s differs between two runs", filepath.Base(f.Path))
		}
	}
	if *update {
		c.errors = nil
		c.want = got
		rewrite(t, c)
	} else {
		if !c.success() {
			t.Fatalf("generation succeeded; want errors:\n%s", c.errors)
		}
		var names []string
		for n := range got {
			names = append(names, n)
		}
		for n := range c.want {
			if _, ok := got[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			if !bytes.Equal(got[n], c.want[n]) {
				t.Errorf("%s differs from want/%s (run go test ./generator -run TestGolden -update)\n--- got:\n%s", n, n, got[n])
			}
		}
	}
	for _, s := range res.Stale {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	for n, data := range got {
		if err := os.WriteFile(filepath.Join(c.dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hasDriver := false
	for _, f := range c.inputs {
		hasDriver = hasDriver || strings.HasSuffix(f.Name, "_test.go")
	}
	if !hasDriver {
		t.Errorf("success case %s has no _test.go driver", c.name)
		return false
	}
	return !t.Failed()
}

// rewrite writes the archive of c back with its new expectations.
func rewrite(t *testing.T, c *goldenCase) {
	t.Helper()
	a := &txtar.Archive{Comment: c.archive.Comment, Files: slices.Clone(c.inputs)}
	var names []string
	for n := range c.want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a.Files = append(a.Files, txtar.File{Name: "want/" + n, Data: c.want[n]})
	}
	if c.errors != nil {
		a.Files = append(a.Files, txtar.File{Name: "want/errors", Data: c.errors})
	}
	if err := os.WriteFile(c.path, txtar.Format(a), 0o644); err != nil {
		t.Fatal(err)
	}
}
