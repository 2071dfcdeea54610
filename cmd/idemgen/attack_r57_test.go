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
// A `// +build` line the go command does not read (go/build honours +build
// lines only in the leading run of // comments, before a blank line) is no
// constraint: the file is in every build. idemgen read it as one and put
// the wrapper under `!idemgen && premium`: the default build had the
// service and the code calling its constructor, but not the constructor
// (undefined: NewIdempotentService). Cases: right above the package clause
// (the package's doc comment, review r57), and right above a block comment
// (a licence header, review r58).
func TestR57PlusBuildWithoutBlankLine(t *testing.T) {
	for _, tc := range []struct{ name, header string }{
		{"in the doc comment", "// Package m has a service.\n// +build premium\npackage m"},
		{"above a block comment", "// +build premium\n/* Copyright 2026 Example Ltd. */\n\npackage m"},
	} {
		t.Run(tc.name, func(t *testing.T) { ignoredPlusBuild(t, tc.header) })
	}
}

// ignoredPlusBuild generates the wrapper of a service whose file starts
// with header (a // +build line the go command ignores) and checks that
// the default build, as the go command reads it, has the wrapper and
// builds.
func ignoredPlusBuild(t *testing.T, header string) {
	t.Helper()
	dir := module(t, map[string]string{
		"svc.go": strings.Replace(service, "package m", header, 1),
		"use.go": "package m\n\nimport idem \"github.com/idemkit/idem/runtime\"\n\nfunc Wrap(s Service, rt *idem.Runtime) Service { return NewIdempotentService(s, rt) }\n",
	})
	// The go command builds svc.go without the tag.
	cmd := exec.Command("go", "list", "-f", "{{.GoFiles}}", ".")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(msg), "svc.go") {
		t.Fatalf("go list: the go command leaves svc.go out without the tag (%v %s): the case is wrong", err, msg)
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
	cmd = exec.Command("go", "build", "./...")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the default build (svc.go and use.go, as the go command reads them) fails with idemgen's wrapper: %v\n%s", err, msg)
	}
	if code, stdout, errOut := runCmd(t, "-check", "."); code != 0 {
		t.Errorf("-check: exit %d\n%s%s", code, stdout, errOut)
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
