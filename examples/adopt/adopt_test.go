// Package adopt_test applies the steps of docs/adopting.md to a copy of
// the shop in ./before, in a module of its own, and checks that the result
// is ./after to the byte, that it builds, that its tests pass and that
// idemlint finds nothing in it (and finds the per-attempt key of the
// "before" retry loop). It runs offline: the copy's module replaces
// github.com/idemkit/idem with this checkout and resolves everything else
// from the module cache (GOPROXY=off), after one `go list -m all` in this
// module has put its module graph's go.mod files there.
package adopt_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
)

// step is one numbered step of docs/adopting.md: the files it writes (as
// they are in ./after) and the commands it runs, in the copy.
type step struct {
	title string
	files []string
	run   func(t *testing.T, dir string)
}

var steps = []step{
	{title: "Add idem to the module", run: func(t *testing.T, dir string) {
		// What `go get github.com/idemkit/idem@latest` does, pointed at
		// this checkout.
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		appendFile(t, filepath.Join(dir, "go.mod"), fmt.Sprintf("\nrequire github.com/idemkit/idem v0.0.0\n\nreplace github.com/idemkit/idem => %s\n", root))
	}},
	{title: "Add the record table to your migrations", files: []string{"migrations/000002_idem_records.down.sql"}, run: func(t *testing.T, dir string) {
		out := goCmd(t, dir, 0, "run", "github.com/idemkit/idem/cmd/idemgen", "schema")
		writeFile(t, filepath.Join(dir, "migrations/000002_idem_records.up.sql"), out)
	}},
	{title: "Let the transport retry the PSP calls", files: []string{"gateway/gateway.go"}},
	{title: "Ask the PSP what happened", files: []string{"gateway/find.go"}},
	{title: "Annotate the interface and go generate", files: []string{"shop/payments.go", "shop/shop.go"}, run: func(t *testing.T, dir string) {
		goCmd(t, dir, 0, "generate", "./shop")
	}},
	{title: "Wire main: store, middleware, reconciler, sweeper", files: []string{"main.go"}},
	{title: "Test the duplicates", files: []string{"shop/shop_test.go"}, run: func(t *testing.T, dir string) {
		goCmd(t, dir, 0, "vet", "./...")
		goCmd(t, dir, 0, "test", "-count=1", "./...")
	}},
	{title: "Configure idemlint", files: []string{".idemlint.json"}, run: func(t *testing.T, dir string) {
		run(t, dir, 0, idemlint, "./...")
	}},
	{title: "Run it in golangci-lint", files: []string{".custom-gcl.yml", ".golangci.yml"}},
	{title: "Run tests and lint in GitHub Actions", files: []string{".github/workflows/ci.yml"}},
	{title: "Resolve stuck records with idemctl"},
}

const (
	beforePath = "github.com/idemkit/idem/examples/adopt/before"
	afterPath  = "github.com/idemkit/idem/examples/adopt/after"
	shopPath   = "example.com/shop"
)

func TestAdopt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own (about 15 s)")
	}
	dir := t.TempDir()
	// The copy resolves every module offline, from the module cache. On a
	// new machine the cache has what this module's build needed, but not
	// the go.mod files of the rest of its module graph (pre-1.17 modules
	// such as pgpassfile list their test dependencies, which an unpruned
	// graph reads): loading this module's whole graph fetches them, through
	// the configured proxy, once; with a warm cache it reads only the cache.
	prefetch := exec.Command("go", "list", "-m", "all")
	prefetch.Dir = "../.."
	prefetch.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := prefetch.CombinedOutput(); err != nil {
		t.Fatalf("go list -m all (fetching the module graph's go.mod files): %v\n%s", err, out)
	}
	// idemlint as installed with go install.
	idemlint = filepath.Join(t.TempDir(), "idemlint")
	run(t, "../..", 0, "go", "build", "-o", idemlint, "./cmd/idemlint")
	copyTree(t, "before", dir, beforePath)
	// The service's own module before idem: pgx and its dependencies at
	// the versions this module uses, so that nothing is downloaded.
	gomod := "module " + shopPath + "\n\ngo 1.26\n\nrequire (\n"
	for _, m := range []string{"github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile", "github.com/jackc/puddle/v2", "golang.org/x/sync", "golang.org/x/text"} {
		v := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(m) + ` (v\S+)`).FindSubmatch(readFile(t, "../../go.mod"))
		if v == nil {
			t.Fatalf("no %s in go.mod", m)
		}
		gomod += "\t" + m + " " + string(v[1]) + "\n"
	}
	writeFile(t, filepath.Join(dir, "go.mod"), []byte(gomod+")\n"))
	writeFile(t, filepath.Join(dir, "go.sum"), readFile(t, "../../go.sum"))

	t.Run("before", func(t *testing.T) {
		goCmd(t, dir, 0, "build", "./...")
		// The hand-written retry loop sends a new key per attempt.
		out := run(t, dir, 3, idemlint, "./...")
		if !bytes.Contains(out, []byte("gateway.go")) || !bytes.Contains(out, []byte("inside a retry loop")) {
			t.Fatalf("idemlint on the before state: want the per-attempt key of gateway.Charge reported; got\n%s", out)
		}
	})
	if t.Failed() {
		return
	}
	doc := string(readFile(t, "../../docs/adopting.md"))
	for i, s := range steps {
		heading := fmt.Sprintf("\n## Step %d: %s\n", i+1, s.title)
		if !strings.Contains(doc, heading) {
			t.Errorf("docs/adopting.md has no heading %q", strings.TrimSpace(heading))
		}
		ok := t.Run(fmt.Sprintf("step %d", i+1), func(t *testing.T) {
			for _, f := range s.files {
				writeFile(t, filepath.Join(dir, f), rewrite(readFile(t, filepath.Join("after", f)), afterPath))
			}
			if s.run != nil {
				s.run(t, dir)
			}
		})
		if !ok {
			return
		}
	}
	// Every file of ./after is what the steps made, generated ones included.
	_ = filepath.WalkDir("after", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel("after", p)
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Errorf("%s: not made by any step: %v", rel, err)
			return nil
		}
		if want := rewrite(readFile(t, p), afterPath); !bytes.Equal(unversioned(got), unversioned(want)) {
			t.Errorf("%s: the steps made another file than examples/adopt/after/%s (regenerate it: go generate ./examples/adopt/after/shop, or idemgen schema)", rel, rel)
		}
		return nil
	})
	t.Run("migrations on PostgreSQL", func(t *testing.T) { migrate(t, dir) })
}

// migrate applies the up migrations in order, then the down ones in
// reverse, in a schema of their own, as golang-migrate or goose would.
func migrate(t *testing.T, dir string) {
	dsn := testenv.PostgresURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := "adopt_" + teststores.Unique()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; SET search_path TO "+schema); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	ups, _ := filepath.Glob(filepath.Join(dir, "migrations", "*.up.sql"))
	downs, _ := filepath.Glob(filepath.Join(dir, "migrations", "*.down.sql"))
	if len(ups) != 2 || len(downs) != 2 {
		t.Fatalf("migrations: %v %v", ups, downs)
	}
	for _, f := range append(ups, downs[1], downs[0]) {
		if _, err := conn.Exec(ctx, string(readFile(t, f))); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the down migrations %d relations remain (%v)", n, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the down migrations %d functions remain (%v)", n, err)
	}
}

// reVersion is the generator's version in a generated file's header.
var reVersion = regexp.MustCompile(`\(idemgen .*$`)

// unversioned blanks the idemgen and Go versions in a file's first line,
// which depend on how idemgen was built (a tagged module or a checkout).
func unversioned(b []byte) []byte {
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	return append(reVersion.ReplaceAll(first, []byte("(idemgen)")), rest...)
}

// rewrite turns the import path of a tree of this module into the copy's.
func rewrite(b []byte, from string) []byte {
	return bytes.ReplaceAll(b, []byte(from), []byte(shopPath))
}

func copyTree(t *testing.T, from, to, path string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		writeFile(t, filepath.Join(to, rel), rewrite(readFile(t, p), path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// idemlint is the idemlint command TestAdopt built.
var idemlint string

// goCmd runs the go command in dir, offline, and wants exit code want.
func goCmd(t *testing.T, dir string, want int, args ...string) []byte {
	t.Helper()
	return run(t, dir, want, "go", args...)
}

// run runs a command in dir, offline, and wants exit code want.
func run(t *testing.T, dir string, want int, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+testenv.ChildGoFlags("-mod=mod"), "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	if code != want {
		t.Fatalf("%s %s: exit %d, want %d:\n%s", name, strings.Join(args, " "), code, want, out.Bytes())
	}
	return out.Bytes()
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	writeFile(t, p, append(readFile(t, p), s...))
}
