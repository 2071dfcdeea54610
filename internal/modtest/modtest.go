// Package modtest prepares the analyzers' module-mode test data
// (testdata/mod, a module requiring the real ORM libraries): it downloads
// the module's dependencies into the module cache, so that
// analysistest, which loads with GOPROXY=off, finds them on a fresh
// machine.
package modtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	err  error
	out  []byte
)

// Dir returns the directory of the test module, testdata/mod under the
// analyzer directory, after downloading its dependencies (once per test
// binary). It fails the test if they cannot be downloaded.
func Dir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "analyzer", "testdata", "mod")
	once.Do(func() {
		cmd := exec.Command("go", "mod", "download")
		cmd.Dir = dir
		// The proxy is reached as for the idemgen tests' scratch modules;
		// go.sum pins every version.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("go mod download in %s: %v\n%s", dir, err, out)
	}
	return dir
}
