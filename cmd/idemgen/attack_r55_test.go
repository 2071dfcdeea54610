package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Review r55. docs/idemgen.md, "What is generated": for each
// //idem:service interface, "the file x_idem.go" with "the build constraint
// //go:build !idemgen"; "idemgen -check fails when generated files are out
// of date" (README.md, "Generated wrappers (idemgen)"); "Generated files that
// no service produces any more (an interface lost its //idem:service) are
// removed, and reported by -check" (docs/idemgen.md, "Stale generated files
// never break loading").
//
// Schedule: the service is declared in a file with a build constraint
// (svc_<GOOS>.go, //go:build <GOOS>, a platform-specific service).
//  1. idemgen on this platform writes service_idem.go with only
//     //go:build !idemgen: the package, which built on every platform
//     before, no longer builds on another one (undefined: Service).
//  2. idemgen -check run for another platform (GOOS set, as on a
//     developer's laptop) reports the up-to-date wrapper stale and exits 1;
//     idemgen (go generate) there deletes it.
func TestR55BuildConstrainedService(t *testing.T) {
	other := "windows"
	if runtime.GOOS == "windows" {
		other = "linux"
	}
	svc := "//go:build " + runtime.GOOS + "\n\n" + service
	dir := module(t, map[string]string{
		"svc_" + runtime.GOOS + ".go": svc,
		"doc.go":                      "// Package m has a platform-specific service.\npackage m\n",
	})
	if code, _, errOut := runCmd(t, "."); code != 0 {
		t.Fatalf("generate: exit %d\n%s", code, errOut)
	}
	out := filepath.Join(dir, "service_idem.go")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "package m")
	t.Logf("generated header:\n%s", head)

	// 1. The package on the other platform.
	cmd := exec.Command("go", "build", ".")
	cmd.Env = append(os.Environ(), "GOOS="+other, "GOARCH=amd64", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("GOOS=%s go build after idemgen: %v\n%s", other, err, msg)
	}

	// 2. -check and generate for the other platform.
	t.Setenv("GOOS", other)
	code, stdout, errOut := runCmd(t, "-check", ".")
	if code != 0 {
		t.Errorf("GOOS=%s idemgen -check on up-to-date files: exit %d\n%s%s", other, code, stdout, errOut)
	}
	if code, stdout, errOut := runCmd(t, "-v", "."); code != 0 || strings.Contains(stdout, "removed") {
		t.Errorf("GOOS=%s idemgen: exit %d\n%s%s", other, code, stdout, errOut)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("GOOS=%s idemgen deleted the wrapper of the %s service: %v", other, runtime.GOOS, err)
	}
}

// Review r55. docs/idemgen.md, Directives: "//idem:service ... option
// file=name.go names the output file"; Errors: idemgen checks "output files
// (...)" and reports "All problems ... idemgen then exits 1 and writes
// nothing"; idemgen already refuses file=x_test.go ("want a file name in
// the package directory ending in .go (not _test.go)"), a file the package
// does not build. Schedule: file= names another file the go command leaves
// out of the package: a leading "_" or "." (ignored by go build), or a
// GOOS/GOARCH suffix of another platform (wrap_windows.go, wrap_arm64.go
// on linux/amd64). The package calls the constructor. idemgen exits 0,
// -check exits 0, and the package does not compile (undefined:
// NewIdempotentSvc). Want: the option refused with its file:line:col.
func TestR55FileOptionOutsideBuild(t *testing.T) {
	otherOS, otherArch := "windows", "arm64"
	if runtime.GOOS == "windows" {
		otherOS = "linux"
	}
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	for _, name := range []string{"_wrap.go", ".wrap.go", "wrap_" + otherOS + ".go", "wrap_" + otherArch + ".go"} {
		t.Run(name, func(t *testing.T) {
			src := `package m

import (
	"context"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type Req struct{ Key string }

//idem:service file=` + name + `
type Service interface {
	//idem:op key=r.Key
	Do(ctx context.Context, r Req) (int, error)
}

type impl struct{}

func (impl) Do(context.Context, Req) (int, error) { return 1, nil }

// Build is the package's use of the generated constructor.
func Build() Service {
	rt, _ := runtime.New(memstore.New())
	return NewIdempotentService(impl{}, rt)
}
`
			module(t, map[string]string{"m.go": src})
			code, stdout, errOut := runCmd(t, "-v", ".")
			t.Logf("idemgen: exit %d\n%s%s", code, stdout, errOut)
			if code == 0 {
				ccode, cout, cerr := runCmd(t, "-check", ".")
				build, err := exec.Command("go", "build", ".").CombinedOutput()
				if err != nil {
					t.Errorf("idemgen exited 0 (-check: %d %s%s) and the package does not build: %v\n%s", ccode, cout, cerr, err, build)
				}
			}
		})
	}
}
