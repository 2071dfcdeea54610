package main

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/version"
)

func TestVersion(t *testing.T) {
	want := "idemctl " + version.Read().String() + "\n"
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		code, stdout, stderr := runFor(t, nil, args...)
		if code != exitOK || stdout != want || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", args, code, stdout, want, stderr)
		}
	}
	if code, _, stderr := runFor(t, nil, "version", "extra"); code != exitUsage || !strings.Contains(stderr, "takes no arguments") {
		t.Errorf("version extra: exit %d, stderr %q", code, stderr)
	}
	// The record version of resolve is another flag.
	if code, _, stderr := runFor(t, nil, "resolve", "-version=-1"); code != exitUsage || strings.Contains(stderr, "idemctl (devel)") {
		t.Errorf("resolve -version=-1: exit %d, stderr %q", code, stderr)
	}
	_, stdout, _ := runFor(t, nil, "-h")
	if !strings.Contains(stdout, "\n  version   ") {
		t.Errorf("usage does not list the version command:\n%s", stdout)
	}
}
