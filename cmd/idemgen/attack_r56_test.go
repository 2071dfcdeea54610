package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docs/idemgen.md, "Services in build-constrained files": "A service
// declared in a file with a build constraint ... exists only in the builds
// that file is in. Its wrapper carries the same constraint ... so builds
// without the file do not see a constructor for an interface they lack. ...
// a run in a build that leaves the file out does not see the service, and
// leaves its wrapper alone rather than remove it as stale; -check there does
// not report it."
//
// Schedule: the service is declared in a cgo file (import "C"), which the
// go command builds only with cgo enabled (an implicit `cgo` constraint,
// as go/build applies it). idemgen with cgo writes service_idem.go; then
//  1. CGO_ENABLED=0 go build of the package fails (undefined: Service);
//  2. CGO_ENABLED=0 idemgen -check reports the up-to-date wrapper stale,
//     and idemgen deletes it.
func TestR56CgoServiceWrapper(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler")
	}
	svc := strings.Replace(service, `import "context"`, "import \"context\"\n\n// int one(void) { return 1; }\nimport \"C\"\n\nvar One = int(C.one())", 1)
	dir := module(t, map[string]string{
		"svc.go": svc,
		"doc.go": "// Package m has a service that needs cgo.\npackage m\n",
	})
	t.Setenv("CGO_ENABLED", "1")
	if code, _, errOut := runCmd(t, "."); code != 0 {
		t.Fatalf("generate with cgo: exit %d\n%s", code, errOut)
	}
	out := filepath.Join(dir, "service_idem.go")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "package m")
	t.Logf("generated header:\n%s", head)

	failed := false
	// A build without cgo leaves the wrapper out with the file (go list
	// says what the build compiles, without compiling the runtime once
	// more without cgo: a cold CI's time).
	cmd := exec.Command("go", "list", "-f", "{{.GoFiles}} {{.IgnoredGoFiles}}", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go list: %v\n%s", err, msg)
	} else if built, _, _ := strings.Cut(string(msg), "] "); strings.Contains(built, "service_idem.go") || strings.Contains(built, "svc.go") {
		failed = true
		t.Errorf("CGO_ENABLED=0 builds the wrapper without its service's file (go list: %s)", msg)
	}

	t.Setenv("CGO_ENABLED", "0")
	if code, stdout, errOut := runCmd(t, "-check", "."); code != 0 {
		failed = true
		t.Errorf("CGO_ENABLED=0 idemgen -check on up-to-date files: exit %d\n%s%s", code, stdout, errOut)
	}
	if code, stdout, errOut := runCmd(t, "-v", "."); code != 0 || strings.Contains(stdout, "removed") {
		t.Errorf("CGO_ENABLED=0 idemgen: exit %d\n%s%s", code, stdout, errOut)
	}
	if _, err := os.Stat(out); err != nil {
		failed = true
		t.Errorf("CGO_ENABLED=0 idemgen deleted the wrapper of the cgo file's service: %v", err)
	}
	_ = failed
}

// Probe: idemgen's output for ops whose types come from another package,
// generic instances, anonymous structs and arrays must compile (docs/
// idemgen.md: idemgen "checks everything with go/types before it writes
// anything"; generated code is gofmt-clean and compiles).
func TestR56GenProbeTypes(t *testing.T) {
	dir := module(t, map[string]string{
		"m.go": `package m

import (
	"context"

	"example.com/m/sub"
)

type Req struct{ Key string }

type Page[T any] struct{ Items []T }

//idem:service
type Service interface {
	//idem:op key=r.Key
	A(ctx context.Context, r Req) (Page[sub.Item], error)
	//idem:op key=r.Key op=B
	B(ctx context.Context, r Req) (map[sub.ID]sub.Item, error)
	//idem:op key=r.K op=C
	C(ctx context.Context, r sub.Req) ([2]sub.Item, error)
	//idem:op key=r.Inner.Key op=D
	D(ctx context.Context, r struct{ Inner struct{ Key string } }) (struct{ X int }, error)
	//idem:op key=r.K op=E fingerprint=r.Gen
	E(ctx context.Context, r *sub.Req) (*Page[*sub.Item], error)
	//idem:op key=r.Key op=F
	F(ctx context.Context, r Page2) (sub.Page[Req], error)
}

type Page2 = struct{ Key string }
`,
	})
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "sub.go"), []byte(`package sub

type Item struct{ ID string }
type ID string
type Key string
type Req struct {
	K   Key
	Gen Page[int]
}
type Page[T any] struct{ Items []T }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := runCmd(t, "./...")
	t.Logf("idemgen: exit %d\n%s%s", code, stdout, errOut)
	if code != 0 {
		return
	}
	cmd := exec.Command("go", "vet", "./...")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "service_idem.go"))
		t.Errorf("go vet after idemgen: %v\n%s\n%s", err, msg, b)
	}
}

// Probe: docs/idemgen.md: "Identifiers never clash: an import whose name is
// taken by a package-scope identifier gets a number (idem2), parameters
// named after an import, a package-scope type or a builtin are renamed in
// the wrapper, and the receiver, locals and wrapper fields avoid the
// parameter and method names."
func TestR56GenProbeNames(t *testing.T) {
	module(t, map[string]string{
		"m.go": `package m

import (
	stdctx "context"
	rt "runtime"
)

var context, errors, fmt, sync, time, json, idem, idem2, pgstore, pgx = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10

type Req struct{ Key string }

type w struct{}
type inner int
type call = int

//idem:service
type Service interface {
	//idem:op key=idem.Key
	Do(ctx stdctx.Context, idem Req) (rt.MemStats, error)
	//idem:op key=r.Key op=X ttl=1h lease=1s
	Inner(w stdctx.Context, r Req) (int, error)
	//idem:skip
	Rt(inner stdctx.Context, call, err int) (int, error)
}
`,
	})
	code, stdout, errOut := runCmd(t, ".")
	t.Logf("idemgen: exit %d\n%s%s", code, stdout, errOut)
	if code != 0 {
		return
	}
	cmd := exec.Command("go", "vet", ".")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b, _ := os.ReadFile("service_idem.go")
		t.Errorf("go vet after idemgen: %v\n%s\n%s", err, msg, b)
	}
}

// Probe: a local op in a package whose scope takes the names the wrapper
// imports (pgx, pgstore, idem, context).
func TestR56GenProbeLocalNames(t *testing.T) {
	module(t, map[string]string{
		"m.go": `package m

import (
	stdctx "context"

	pgxv5 "github.com/jackc/pgx/v5"
)

var context, pgstore, pgx, idem, tx, req, ctx = 1, 2, 3, 4, 5, 6, 7

type Req struct{ Key string }

//idem:service
type Service interface {
	//idem:op key=r.Key effect=local scope=r.Key
	Pay(c stdctx.Context, t pgxv5.Tx, r Req) (int, error)
	//idem:op key=pgx.Key effect=local op=Two
	Two(pgstore stdctx.Context, tx pgxv5.Tx, pgx Req) (Req, error)
}
`,
	})
	code, stdout, errOut := runCmd(t, ".")
	t.Logf("idemgen: exit %d\n%s%s", code, stdout, errOut)
	if code != 0 {
		return
	}
	cmd := exec.Command("go", "vet", ".")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b, _ := os.ReadFile("service_idem.go")
		t.Errorf("go vet after idemgen: %v\n%s\n%s", err, msg, b)
	}
}

// Probe: two services written to one file (file= and another's default
// name) must be refused with a position, never one overwriting the other.
func TestR56GenProbeSameFile(t *testing.T) {
	module(t, map[string]string{
		"m.go": `package m

import "context"

type Req struct{ Key string }

//idem:service file=b_idem.go
type A interface {
	//idem:op key=r.Key
	Do(ctx context.Context, r Req) (int, error)
}

//idem:service
type B interface {
	//idem:op key=r.Key
	Do(ctx context.Context, r Req) (int, error)
}
`,
		"use.go": `package m

var _ = NewIdempotentA
var _ = NewIdempotentB
`,
	})
	code, stdout, errOut := runCmd(t, ".")
	t.Logf("idemgen: exit %d\n%s%s", code, stdout, errOut)
	if code == 0 {
		cmd := exec.Command("go", "vet", ".")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("idemgen exit 0 and go vet fails: %v\n%s", err, msg)
		}
	} else if !strings.Contains(errOut, "m.go:") {
		t.Errorf("refused without a position: %s", errOut)
	}
}
