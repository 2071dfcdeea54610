package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docs/idemgen.md, "What is generated": the wrapper carries "the build
// constraint `//go:build !idemgen` ..., and with it the constraint of the
// file that declares `X`, if it has one"; "Services in build-constrained
// files": "Its wrapper carries the same constraint ..., so builds without
// the file do not see a constructor for an interface they lack."
//
// A `// +build` line that is not followed by a blank line (here: right
// above the package clause, in the package's doc comment) is no
// constraint for the go command (go/build honours +build lines only
// before a blank line): the file is in every build. idemgen reads it as a
// constraint and puts the wrapper under `!idemgen && premium`: the default
// build has the service and the code calling its constructor, but not the
// constructor (undefined: NewIdempotentService).
func TestR57PlusBuildWithoutBlankLine(t *testing.T) {
	svc := strings.Replace(service, "package m", "// Package m has a service.\n// +build premium\npackage m", 1)
	dir := module(t, map[string]string{
		"svc.go": svc,
		"use.go": "package m\n\nimport idem \"github.com/idemkit/idem/runtime\"\n\nfunc Wrap(s Service, rt *idem.Runtime) Service { return NewIdempotentService(s, rt) }\n",
	})
	// The go command builds svc.go without the tag.
	cmd := exec.Command("go", "list", "-f", "{{.GoFiles}}", ".")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(msg), "svc.go") {
		t.Fatalf("go list: %v %s", err, msg)
	}
	if code, _, errOut := runCmd(t, "."); code != 0 {
		t.Fatalf("generate: exit %d\n%s", code, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "service_idem.go"))
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "package m")
	t.Logf("generated header:\n%s", head)
	cmd = exec.Command("go", "list", "-f", "{{.GoFiles}}", ".")
	cmd.Dir = dir
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, msg)
	}
	if !strings.Contains(string(msg), "service_idem.go") {
		t.Errorf("the default build has svc.go and use.go but not the wrapper (go list: %s): use.go's NewIdempotentService is undefined", strings.TrimSpace(string(msg)))
	}
	if code, stdout, errOut := runCmd(t, "-check", "."); code != 0 {
		t.Logf("-check: exit %d\n%s%s", code, stdout, errOut)
	}
}

// README: "A response type that is an interface, or a pointer to one,
// makes every duplicate `ErrNotReplayable` ...; idemgen refuses such ops."
// CHANGELOG (Unreleased): "idemgen refuses ops returning a pointer to an
// interface too." A defined pointer type (`type Ref *fmt.Stringer`) is a
// pointer to an interface (the runtime reads it so: its duplicates are
// ErrNotReplayable), but idemgen accepts the op and exits 0.
func TestR57NamedPointerToInterface(t *testing.T) {
	dir := module(t, map[string]string{
		"m.go": `package m

import (
	"context"
	"fmt"
)

type Req struct{ Key string }

type Ref *fmt.Stringer

type Any *any

//idem:service
type Service interface {
	//idem:op key=r.Key
	Do(ctx context.Context, r Req) (Ref, error)
	//idem:op key=r.Key
	Get(ctx context.Context, r Req) (Any, error)
}
`,
	})
	code, stdout, errOut := runCmd(t, ".")
	t.Logf("exit %d\n%s%s", code, stdout, errOut)
	if code == 0 {
		t.Errorf("idemgen accepted ops returning a defined pointer to an interface (Ref, Any); files: %v", r57Files(dir))
	}
	for _, m := range []string{"Do", "Get"} {
		if !strings.Contains(errOut, m) && code != 0 {
			t.Errorf("no error at %s:\n%s", m, errOut)
		}
	}
}

func r57Files(dir string) []string {
	es, _ := os.ReadDir(dir)
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}
