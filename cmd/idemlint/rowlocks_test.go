package main_test

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCallersRowLocks lints analyzer/testdata/locks (a module of its own)
// with the command: repository helpers that write a status by key alone,
// called through an interface from a package that does not import them.
// A helper whose every caller locks the row (FOR UPDATE, through an
// interface method) in the same transaction and checks its state under the
// lock is silent, also when the key is a field of the locked row, and so is
// a helper called in its own package after a local locker; one with an
// unlocked caller (named in the message), a caller that never reads the
// state, one that commits before the call, or one that "locks" on the pool
// outside a transaction stays reported. A run on part of the module judges
// every helper alone.
func TestCallersRowLocks(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	mod := filepath.Join(filepath.Dir(file), "..", "..", "analyzer", "testdata", "locks")
	want, silent := map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir(mod, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mod, path)
		for i, line := range strings.Split(string(data), "\n") {
			at := filepath.ToSlash(rel) + ":" + strconv.Itoa(i+1)
			switch {
			case strings.HasSuffix(line, "// want blindupdate"):
				want[at] = true
			case strings.HasSuffix(line, "// silent"):
				silent[at] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 4 || len(silent) != 3 {
		t.Fatalf("labels: %d want, %d silent; the module has 4 and 3", len(want), len(silent))
	}
	bin := idemlintBinary(t)
	lines := func(args ...string) (map[string]bool, string) {
		t.Helper()
		stdout, stderr, code := run(t, mod, bin, args...)
		if code != 0 && code != 3 {
			t.Fatalf("idemlint %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		got := map[string]bool{}
		for _, l := range strings.Split(stderr, "\n") {
			if !strings.HasPrefix(l, "\t") && strings.Contains(l, "a state transition without compare-and-set") {
				parts := strings.SplitN(l, ":", 3)
				got[parts[0]+":"+parts[1]] = true
			}
		}
		return got, stderr
	}
	got, out := lines("./...")
	if diff := lockDiff(got, want); diff != "" {
		t.Errorf("whole module: %s\n%s", diff, out)
	}
	if !strings.Contains(out, "SetShipmentStatus is called at app.go:") || !strings.Contains(out, "in (*app.Service).Ship with no row lock held on it") {
		t.Errorf("the unlocked caller of SetShipmentStatus is not named:\n%s", out)
	}
	all := map[string]bool{}
	for k := range want {
		all[k] = true
	}
	for k := range silent {
		all[k] = true
	}
	got, out = lines("./ports/...", "./adapters/...", "./app/...", "./direct/...")
	if diff := lockDiff(got, all); diff != "" {
		t.Errorf("part of the module (cli left out): %s\n%s", diff, out)
	}
}

// lockDiff describes how got differs from want ("" when equal).
func lockDiff(got, want map[string]bool) string {
	var d []string
	for k := range want {
		if !got[k] {
			d = append(d, "missed "+k)
		}
	}
	for k := range got {
		if !want[k] {
			d = append(d, "unexpected "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}
