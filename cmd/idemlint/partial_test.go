package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// partialModule is a module in which three packages fail to load, each in
// its own way, and a fourth imports one of them, next to a package with a
// true finding.
func partialModule(t *testing.T) string {
	t.Helper()
	return writeFiles(t, map[string]string{
		"go.mod": "module example.com/partial\n\ngo 1.26\n\nrequire example.com/gone v1.0.0\n",
		"go.sum": "",
		// A true finding.
		"shop/shop.go": bad,
		// A go:embed pattern whose files are missing.
		"assets/assets.go": "package assets\n\nimport \"embed\"\n\n//go:embed static\nvar Static embed.FS\n",
		// A generated file that is gitignored, so absent.
		"gen/gen.go":     "package gen\n\n// Version is set in version_gen.go (generated, gitignored).\nfunc Version() string { return generatedVersion }\n",
		"gen/.gitignore": "version_gen.go\n",
		// A module the proxy cannot serve.
		"remote/remote.go": "package remote\n\nimport \"example.com/gone/lib\"\n\nfunc Do() { lib.Do() }\n",
		// A package that loads, but imports one that does not.
		"user/user.go": "package user\n\nimport \"example.com/partial/assets\"\n\nvar FS = assets.Static\n",
	})
}

// TestPartialProgram: packages that fail to load do not blank the run. The
// others are analyzed (the finding in shop is reported), each load error is
// reported once with its position, the packages not analyzed are named,
// and the exit status is 1.
func TestPartialProgram(t *testing.T) {
	bin := idemlintBinary(t)
	dir := partialModule(t)
	// GOPROXY=off: example.com/gone cannot be served.
	env := []string{"GOFLAGS=" + testenv.ChildGoFlags("-mod=mod"), "GOPROXY=off"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"text", []string{"./..."}},
		{"json", []string{"-json", "./..."}},
		{"sarif", []string{"-sarif", "./..."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runEnv(t, dir, env, bin, tc.args...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			findings := stderr
			if tc.name != "text" {
				findings = stdout
			}
			if !strings.Contains(findings, "shop.go:19:12") || !strings.Contains(findings, "may do network I/O") {
				t.Errorf("the finding in shop is missing:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			for _, want := range []string{
				"assets/assets.go:5:12: pattern static: no matching files found",
				"gen/gen.go:4:32: undefined: generatedVersion",
				"remote/remote.go:3:8: ",
			} {
				if n := strings.Count(stderr, want); n != 1 {
					t.Errorf("stderr has %q %d times, want once:\n%s", want, n, stderr)
				}
			}
			const notAnalyzed = "idemlint: 4 packages not analyzed (they or their imports did not load): example.com/partial/assets, example.com/partial/gen, example.com/partial/remote, example.com/partial/user\n"
			if !strings.Contains(stderr, notAnalyzed) {
				t.Errorf("stderr lacks %q:\n%s", notAnalyzed, stderr)
			}
			if tc.name == "json" {
				var tree map[string]map[string][]json.RawMessage
				if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
					t.Fatalf("-json output: %v\n%s", err, stdout)
				}
				if len(tree["example.com/partial/shop"]["txrpc"]) != 1 {
					t.Errorf("-json: want one txrpc finding in shop:\n%s", stdout)
				}
			}
		})
	}
}
