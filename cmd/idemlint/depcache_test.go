package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/analyzer"
	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/internal/testenv"
)

// The module cache of TestDepCacheEdits: a dependency that does network
// I/O.
const depSrc = `package dep

import (
	"context"
	"net/http"
)

// Notify posts to the gateway.
func Notify(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://pay.example/n?id="+id, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Client is Notify as a method: its summary is in the Program.
type Client struct{}

func (*Client) Notify(ctx context.Context, id string) error { return Notify(ctx, id) }
`

const apiSrc = `package api

import "context"

type Notifier interface{ Notify(ctx context.Context, id string) error }
`

// implSrc implements api.Notifier over dep.Notify (body is the method's).
const implSrc = `package impl

import (
	"context"

	"example.com/dep"
)

type Gateway struct{}

func (*Gateway) Notify(ctx context.Context, id string) error { %s }
`

// shopSrc calls dep.Notify directly (CALL) and through the interface
// inside a transaction.
const shopSrc = `package shop

import (
	"context"
	"database/sql"

	"example.com/app/api"
	"example.com/dep"
)

var _ = dep.Notify

func Charge(ctx context.Context, db *sql.DB, n api.Notifier, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET state='PROCESSING' WHERE id=$1", id); err != nil {
		return err
	}
	%s
	_ = n.Notify(ctx, id)
	return tx.Commit()
}
`

// depV2Src is example.com/dep v1.1.0: Notify queues the request instead of
// sending it (no network I/O). It imports what v1.0.0 imports.
const depV2Src = `package dep

import (
	"context"
	"net/http"
)

var queue = make(chan *http.Request, 64)

// Notify queues a request to the gateway.
func Notify(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://pay.example/n?id="+id, nil)
	if err != nil {
		return err
	}
	select {
	case queue <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Client is Notify as a method: its summary is in the Program.
type Client struct{}

func (*Client) Notify(ctx context.Context, id string) error { return Notify(ctx, id) }
`

// goModSrc is app's go.mod requiring example.com/dep at a version, found
// in the test's module cache.
const goModSrc = "module example.com/app\n\ngo 1.26\n\nrequire example.com/dep %[1]s\n\nreplace example.com/dep => ../modcache/example.com/dep@%[1]s\n"

// payOwn and payAlias are two versions of an in-module package's exported
// API: its own Client, which does no I/O, or dep's, under an alias;
// payPosts has payOwn's API, its method posting what it queued; payEmbed
// has payOwn's imports, and its Client embeds dep's (whose Notify posts)
// instead of declaring its own. Both
// import dep, so that the importer (orderSrc), whose files do not change,
// has the same imports in both.
const (
	payOwn   = "package pay\n\nimport (\n\t\"context\"\n\n\t\"example.com/dep\"\n)\n\n// Client queues the payments for the gateway.\ntype Client struct {\n\tgw     *dep.Client\n\tqueued []string\n}\n\nfunc (c *Client) Notify(ctx context.Context, id string) error {\n\tc.queued = append(c.queued, id)\n\treturn nil\n}\n"
	payPosts = "package pay\n\nimport (\n\t\"context\"\n\n\t\"example.com/dep\"\n)\n\n// Client queues the payments for the gateway.\ntype Client struct {\n\tgw     *dep.Client\n\tqueued []string\n}\n\nfunc (c *Client) Notify(ctx context.Context, id string) error {\n\tc.queued = append(c.queued, id)\n\tfor _, q := range c.queued {\n\t\tif err := c.gw.Notify(ctx, q); err != nil {\n\t\t\treturn err\n\t\t}\n\t}\n\tc.queued = c.queued[:0]\n\treturn nil\n}\n"
	payEmbed = "package pay\n\nimport (\n\t\"context\"\n\n\t\"example.com/dep\"\n)\n\nvar _ context.Context\n\n// Client queues the payments for the gateway.\ntype Client struct {\n\t*dep.Client\n\tqueued []string\n}\n"
	payAlias = "package pay\n\nimport \"example.com/dep\"\n\n// Client is the gateway's.\ntype Client = dep.Client\n"
)

const orderSrc = `package order

import (
	"context"
	"database/sql"

	"example.com/app/pay"
)

func Place(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET state='PAID' WHERE id=$1", id); err != nil {
		return err
	}
	_ = (&pay.Client{}).Notify(ctx, id)
	return tx.Commit()
}
`

// TestDepCacheEdits drives the language server's linter through a
// sequence of edits and checks after each that its findings equal a fresh
// run of the command's driver: the dependency's facts come from the cache
// from the second run on (it must not be analyzed again, and what it does
// must still be seen), and the module's own packages are forgotten in the
// kept facts.Program and analyzed again, so that a deleted implementation
// leaves no finding behind.
func TestDepCacheEdits(t *testing.T) {
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", testenv.ChildGoFlags())
	root := t.TempDir()
	cacheDir := filepath.Join(root, "modcache")
	app := filepath.Join(root, "app")
	write := func(files map[string]string) {
		t.Helper()
		for name, content := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(map[string]string{
		"modcache/example.com/dep@v1.0.0/go.mod": "module example.com/dep\n\ngo 1.26\n",
		"modcache/example.com/dep@v1.0.0/dep.go": depSrc,
		"modcache/example.com/dep@v1.1.0/go.mod": "module example.com/dep\n\ngo 1.26\n",
		"modcache/example.com/dep@v1.1.0/dep.go": depV2Src,
		"app/go.mod":                             fmt.Sprintf(goModSrc, "v1.0.0"),
		"app/api/api.go":                         apiSrc,
		"app/impl/impl.go":                       fmt.Sprintf(implSrc, "return dep.Notify(ctx, id)"),
		"app/shop/shop.go":                       fmt.Sprintf(shopSrc, "_ = dep.Notify(ctx, id)"),
	})
	l := &lspLinter{last: map[string]lspRun{}, deps: map[string]*depCache{}, modCache: cacheDir, modCacheOK: true}
	ctx := context.Background()

	findings := findingLines
	fresh := func() []finding { t.Helper(); return commandFindings(t, ctx, app) }
	// must lists findings the command must have in this state, and, with
	// a "!" before them, findings it must not have.
	// goList says, for each step, whether the server must run go list
	// (true) or may reuse its last listing (false): only a save that
	// changes no package's imports, package clause, build constraints or
	// file list, in packages no other package imports, may skip it.
	goList := map[string]bool{
		"first run":                                                          true,
		"call moved out of the transaction":                                  false,
		"call moved back in":                                                 false,
		"the implementation stops doing I/O":                                 true, // its import of dep unused: go list's error
		"the implementation's method deleted":                                true,
		"a file with a new implementation created":                           true,
		"that file deleted":                                                  true,
		"a package embedding the dependency's type created":                  true,
		"that package deleted":                                               true,
		"go.mod: dep upgraded to a version that queues":                      true,
		"go.mod: dep back to the version that posts":                         true,
		"after the go.mod edits, the call moved out again":                   false,
		"an importer of an in-module package created":                        true,
		"the package's Client becomes dep's: the importer calls the network": true,
		"the package's Client its own again":                                 true,
		"the package's method posts what it queued":                          true, // pay has an importer
		"a comment added to the importer":                                    false,
		"the posting method calls dep.Notify":                                true,
		"the package's method queues again":                                  true,
		"the package's Client embeds dep's, its header unchanged":            true,
		"the package's Client its own again, its header unchanged":           true,
		"an import added to a leaf package":                                  true,
		"a body edit in that package":                                        false,
		"a build constraint added":                                           true,
		"the build constraint changed":                                       true,
		"a generated file added":                                             true,
		"the generated file edited":                                          true,
	}
	step := func(name string, wantReused bool, must ...string) {
		t.Helper()
		wantList, ok := goList[name]
		if !ok {
			t.Fatalf("%s: no go list expectation", name)
		}
		lists := l.goLists.Load()
		if _, err := l.lint(ctx, app, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ran := l.goLists.Load() > lists; ran != wantList {
			t.Errorf("%s: go list ran: %v, want %v", name, ran, wantList)
		}
		got, cmd := findings(l.last[app].res.findings, true), fresh()
		if want := findings(cmd, true); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: the server found\n\t%s\nthe command\n\t%s", name, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		want := findings(cmd, false)
		for _, m := range must {
			if absent, ok := strings.CutPrefix(m, "!"); ok {
				if slices.Contains(want, absent) {
					t.Errorf("%s: the command finds %q (the test is wrong): %q", name, absent, want)
				}
			} else if !slices.Contains(want, m) {
				t.Errorf("%s: the command does not find %q (the test is wrong): %q", name, m, want)
			}
		}
		if c := l.deps[app]; c == nil || c.reused["example.com/dep"] != wantReused {
			t.Errorf("%s: example.com/dep's facts reused: %v, want %v", name, c != nil && c.reused["example.com/dep"], wantReused)
		}
	}
	// firstPass and secondPass check which of the module's packages the
	// last run's first or second pass analyzed again (false) or kept
	// (true).
	firstPass := func(name string, kept map[string]bool) {
		t.Helper()
		for id, want := range kept {
			if got := l.deps[app].reused[id]; got != want {
				t.Errorf("%s: %s's first pass kept: %v, want %v", name, id, got, want)
			}
		}
	}
	secondPass := func(name string, kept map[string]bool) {
		t.Helper()
		for id, want := range kept {
			if got := l.deps[app].reused2[id]; got != want {
				t.Errorf("%s: %s's second pass kept: %v, want %v", name, id, got, want)
			}
		}
	}
	direct, viaIface := "shop.go:22 txrpc", "shop.go:23 txrpc"

	step("first run", false, direct, viaIface)
	write(map[string]string{"app/shop/shop.go": fmt.Sprintf(shopSrc, "// moved out")})
	step("call moved out of the transaction", true, viaIface)
	firstPass("call moved out of the transaction", map[string]bool{
		"example.com/app/shop": false, "example.com/app/api": true, "example.com/app/impl": true})
	write(map[string]string{"app/shop/shop.go": fmt.Sprintf(shopSrc, "_ = dep.Notify(ctx, id)")})
	step("call moved back in", true, direct, viaIface)
	write(map[string]string{"app/impl/impl.go": fmt.Sprintf(implSrc, "return nil")})
	step("the implementation stops doing I/O", true, direct)
	write(map[string]string{"app/impl/impl.go": "package impl\n\ntype Gateway struct{}\n"})
	step("the implementation's method deleted", true, direct)
	write(map[string]string{"app/impl/web.go": "package impl\n\nimport (\n\t\"context\"\n\n\t\"example.com/dep\"\n)\n\ntype Web struct{}\n\nfunc (*Web) Notify(ctx context.Context, id string) error { return dep.Notify(ctx, id) }\n"})
	step("a file with a new implementation created", true, direct, viaIface)
	if err := os.Remove(filepath.Join(app, "impl", "web.go")); err != nil {
		t.Fatal(err)
	}
	step("that file deleted", true, direct)
	write(map[string]string{"app/wrap/wrap.go": "package wrap\n\nimport \"example.com/dep\"\n\n// Wrapped implements api.Notifier with dep's method.\ntype Wrapped struct{ *dep.Client }\n"})
	step("a package embedding the dependency's type created", true, direct, viaIface)
	if err := os.RemoveAll(filepath.Join(app, "wrap")); err != nil {
		t.Fatal(err)
	}
	step("that package deleted", true, direct)

	// go.mod edited mid-session: the dependency's new version no longer
	// does I/O. Its package path is the same; its facts must not be the
	// old version's.
	write(map[string]string{"app/go.mod": fmt.Sprintf(goModSrc, "v1.1.0")})
	step("go.mod: dep upgraded to a version that queues", false, "!"+direct)
	write(map[string]string{"app/go.mod": fmt.Sprintf(goModSrc, "v1.0.0")})
	step("go.mod: dep back to the version that posts", false, direct)
	write(map[string]string{"app/shop/shop.go": fmt.Sprintf(shopSrc, "// moved out")})
	step("after the go.mod edits, the call moved out again", true, "!"+direct)

	// An exported-API change in one package of the module flips a finding
	// in a package that imports it, whose own files do not change.
	orderCall := "order.go:19 txrpc"
	write(map[string]string{"app/pay/pay.go": payOwn, "app/order/order.go": orderSrc})
	step("an importer of an in-module package created", true, "!"+orderCall)
	write(map[string]string{"app/pay/pay.go": payAlias})
	step("the package's Client becomes dep's: the importer calls the network", true, orderCall)
	firstPass("the package's Client becomes dep's", map[string]bool{
		"example.com/app/pay": false, "example.com/app/order": false, "example.com/app/shop": true})
	write(map[string]string{"app/pay/pay.go": payOwn})
	step("the package's Client its own again", true, "!"+orderCall)

	// The same package's method starts posting, its API unchanged: the
	// importer's export data is the same, its finding is not.
	write(map[string]string{"app/pay/pay.go": payPosts})
	step("the package's method posts what it queued", true, orderCall, viaIface)
	firstPass("the package's method posts", map[string]bool{
		"example.com/app/pay": false, "example.com/app/order": false, "example.com/app/shop": true})
	// pay's method's summary changed: shop's interface call resolves
	// differently.
	secondPass("the package's method posts", map[string]bool{"example.com/app/shop": false})

	// An edit that changes nothing any interface call resolves to: shop's
	// second pass is kept, with its finding.
	write(map[string]string{"app/order/order.go": orderSrc + "\n// Placed orders are paid.\n"})
	step("a comment added to the importer", true, orderCall, viaIface)
	firstPass("a comment added to the importer", map[string]bool{"example.com/app/order": false, "example.com/app/shop": true})
	secondPass("a comment added to the importer", map[string]bool{"example.com/app/shop": true})

	// The posting method posts through dep's function, not its method:
	// shop's interface call resolves to the same method, through another
	// chain of calls, which shop's finding names.
	write(map[string]string{"app/pay/pay.go": strings.Replace(payPosts, "c.gw.Notify(ctx, q)", "dep.Notify(ctx, q)", 1)})
	step("the posting method calls dep.Notify", true, orderCall, viaIface)
	secondPass("the posting method calls dep.Notify", map[string]bool{"example.com/app/shop": false})

	write(map[string]string{"app/pay/pay.go": payOwn})
	step("the package's method queues again", true, "!"+orderCall, "!"+viaIface)

	// pay's exported API changes with its imports and build unchanged:
	// Client embeds dep's and loses its own method. Its importer order,
	// whose files do not change, must be type-checked against pay's new
	// API (go list runs), and calls the network.
	write(map[string]string{"app/pay/pay.go": payEmbed})
	step("the package's Client embeds dep's, its header unchanged", true, orderCall)
	write(map[string]string{"app/pay/pay.go": payOwn})
	step("the package's Client its own again, its header unchanged", true, "!"+orderCall)

	// Edits of a leaf package that change what go list says of it.
	withFmt := strings.Replace(fmt.Sprintf(shopSrc, "_ = dep.Notify(ctx, id)"), "import (\n", "import (\n\t\"fmt\"\n", 1) + "\nvar _ = fmt.Sprint\n"
	write(map[string]string{"app/shop/shop.go": withFmt})
	step("an import added to a leaf package", true, "shop.go:23 txrpc") // one line down
	write(map[string]string{"app/shop/shop.go": strings.Replace(withFmt, "_ = dep.Notify(ctx, id)", "// moved out", 1)})
	step("a body edit in that package", true, "!shop.go:23 txrpc")
	write(map[string]string{"app/shop/shop.go": "//go:build !nothing\n\n" + withFmt})
	step("a build constraint added", true, "shop.go:25 txrpc")
	write(map[string]string{"app/shop/shop.go": "//go:build !nothing && !other\n\n" + withFmt})
	step("the build constraint changed", true, "shop.go:25 txrpc")
	gen := "// Code generated by hand. DO NOT EDIT.\n\npackage shop\n\nfunc generated() {}\n"
	write(map[string]string{"app/shop/gen.go": gen})
	step("a generated file added", true, "shop.go:25 txrpc")
	write(map[string]string{"app/shop/gen.go": gen + "\nfunc generated2() {}\n"})
	step("the generated file edited", true, "shop.go:25 txrpc")
}

// commandFindings is a fresh run of the command's driver on dir's ./...,
// with a Program of its own: what the server's findings must equal.
func commandFindings(t *testing.T, ctx context.Context, dir string) []finding {
	t.Helper()
	prog := facts.NewProgram()
	rules, f, err := analyzer.NewSuite(analyzer.Settings{}, facts.Config{Program: prog})
	if err != nil {
		t.Fatal(err)
	}
	res, err := lint(ctx, dir, analyzer.Settings{}, prog, rules, f, []string{"./..."}, true, io.Discard, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	return res.findings
}

// findingLines lists fs as "file:line rule" or, in full, with the message
// and the related positions (which name the leaf network call in another
// package), sorted.
func findingLines(fs []finding, full bool) []string {
	var out []string
	for _, f := range fs {
		s := fmt.Sprintf("%s:%d %s", filepath.Base(f.file), f.line, f.rule)
		if full {
			s += ": " + f.msg
			for _, r := range f.related {
				s += fmt.Sprintf("\n\t\t%s:%d:%d %s", filepath.Base(r.start.Filename), r.start.Line, r.start.Column, r.msg)
			}
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TestDepCacheRowLocks: blindupdate's callers' row locks in the language
// server, whose saves keep the second pass of unchanged packages while the
// facts.Program's digest of the redone ones is unchanged. A caller that
// stops checking the locked row's state (an edit of the caller's package
// only) must bring back the findings of the helpers it calls, in another
// package; putting the check back must silence them again.
func TestDepCacheRowLocks(t *testing.T) {
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", testenv.ChildGoFlags())
	app := filepath.Join(t.TempDir(), "locks")
	if err := os.CopyFS(app, os.DirFS(filepath.Join("..", "..", "analyzer", "testdata", "locks"))); err != nil {
		t.Fatal(err)
	}
	appGo := filepath.Join(app, "app", "app.go")
	orig, err := os.ReadFile(appGo)
	if err != nil {
		t.Fatal(err)
	}
	const check = "\tif o.Status == \"PAID\" {\n\t\treturn tx.Commit()\n\t}\n"
	if !strings.Contains(string(orig), check) {
		t.Fatalf("app.go has no %q: the test is out of date", check)
	}
	l := &lspLinter{last: map[string]lspRun{}, deps: map[string]*depCache{}, modCache: t.TempDir(), modCacheOK: true}
	ctx := context.Background()
	for _, st := range []struct {
		name string
		src  string
		// silent: whether adapters.go:24 (SetOrderStatus) is silent.
		silent bool
	}{
		{"as written", string(orig), true},
		{"the state check removed", strings.Replace(string(orig), check, "", 1), false},
		{"the state check back", string(orig), true},
	} {
		if err := os.WriteFile(appGo, []byte(st.src), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := l.lint(ctx, app, nil); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		cmd := commandFindings(t, ctx, app)
		got, want := findingLines(l.last[app].res.findings, true), findingLines(cmd, true)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: the server found\n\t%s\nthe command\n\t%s", st.name, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		if has := slices.Contains(findingLines(cmd, false), "adapters.go:24 blindupdate"); has == st.silent {
			t.Errorf("%s: the command reports adapters.go:24: %v, want %v (the test is wrong)", st.name, has, !st.silent)
		}
	}
}
