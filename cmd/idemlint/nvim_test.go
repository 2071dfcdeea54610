package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// TestNeovim runs the language server in a real editor: headless Neovim
// with testdata/nvim/init.lua (the built-in LSP client, no plugin) opens a
// module's file with a txrpc bug, and testdata/nvim/check.lua checks the
// diagnostic (rule, line, related information) through vim.diagnostic.get,
// applies the fix, writes, checks the diagnostics are gone, then runs the
// suppress code action. Under CI a missing nvim fails the test
// (scripts/test.sh installs Debian's neovim).
func TestNeovim(t *testing.T) {
	nvim, err := exec.LookPath("nvim")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("nvim is not on PATH: the editor test is required under CI (scripts/test.sh installs Debian's neovim)")
		}
		t.Skip("nvim is not on PATH: install Neovim (Debian's neovim) to run the editor test")
	}
	bin := idemlintBinary(t)
	mod, home := t.TempDir(), t.TempDir()
	writeInto(t, mod, map[string]string{"go.mod": "module example.com/shop\n\ngo 1.26\n", "shop/shop.go": bad})
	writeInto(t, home, map[string]string{"good.go": good, "bad.go": bad})
	testdata, err := filepath.Abs(filepath.Join("testdata", "nvim"))
	if err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(home, "result")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nvim, "--headless", "-n", "-i", "NONE", "--noplugin",
		"-u", filepath.Join(testdata, "init.lua"),
		"-c", "luafile "+filepath.Join(testdata, "check.lua"),
		filepath.Join("shop", "shop.go"))
	cmd.Dir = mod
	cmd.Env = append(os.Environ(),
		"IDEMLINT="+bin,
		"IDEM_NVIM_RESULT="+result,
		"IDEM_NVIM_GOOD="+filepath.Join(home, "good.go"),
		"IDEM_NVIM_BAD="+filepath.Join(home, "bad.go"),
		// Neovim's files (its LSP log among them) stay in the test's
		// directory.
		"HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home, "XDG_STATE_HOME="+home, "XDG_CACHE_HOME="+home,
	)
	// With HOME moved, the go command must keep its caches: a cold build
	// cache would compile the standard library.
	goenv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	for i, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		cmd.Env = append(cmd.Env, name+"="+strings.Split(string(goenv), "\n")[i])
	}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	report, _ := os.ReadFile(result)
	t.Logf("nvim ran %v:\n%s", time.Since(t0).Round(time.Millisecond), report)
	if err != nil || !strings.Contains(string(report), "ok: suppressed by the code action") {
		logs, _ := filepath.Glob(filepath.Join(home, "*", "lsp.log"))
		more, _ := filepath.Glob(filepath.Join(home, "nvim", "lsp.log"))
		for _, l := range append(logs, more...) {
			if data, err := os.ReadFile(l); err == nil {
				t.Logf("%s:\n%s", l, data)
			}
		}
		t.Fatalf("nvim: %v\n%s", err, out)
	}
}
