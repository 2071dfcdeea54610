package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
)

// wholePackages returns the root packages whose callers are all in the
// run: those of a module whose every package (as go list -find lists
// module/...) is a root that loaded and was analyzed. blindupdate judges a
// helper by its callers' row locks only there; in a run on part of a
// module, a caller outside it could hold no lock.
func wholePackages(ctx context.Context, pkgs []*listed, failed map[string]bool) []string {
	byMod := map[string][]*listed{}
	for _, p := range pkgs {
		if p.DepOnly || p.Module == nil {
			continue
		}
		byMod[p.Module.Path] = append(byMod[p.Module.Path], p)
	}
	var out []string
	for mod, roots := range byMod {
		have := map[string]bool{}
		ok := true
		for _, p := range roots {
			have[p.path()] = true
			ok = ok && !p.broken() && !failed[p.ImportPath]
		}
		if !ok {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", "list", "-e", "-find", "-f", "{{.ImportPath}}", "--", mod+"/...")
		cmd.Dir = roots[0].Dir
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if cmd.Run() != nil {
			continue
		}
		for _, path := range strings.Fields(stdout.String()) {
			ok = ok && have[path]
		}
		if !ok {
			continue
		}
		for path := range have {
			out = append(out, path)
		}
	}
	return out
}
