package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "bbbb1a67cd2da1d3cac4952c4b0c8f319b9a7ea8"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	idem := func(v string) debug.Module { return debug.Module{Path: Module, Version: v} }
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @version", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("v0.4.0")}, "v0.4.0 go1.26.8"},
		{"go install of a test version", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("v0.0.0-test")}, "v0.0.0-test go1.26.8"},
		{"checkout without VCS stamping", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("(devel)")}, "(devel) go1.26.8"},
		{"checkout, no version at all", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("")}, "(devel) go1.26.8"},
		{"checkout with a revision", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("(devel)"), Settings: vcs("false")},
			"(devel) revision " + rev + " go1.26.8"},
		{"checkout with a modified tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("(devel)"), Settings: vcs("true")},
			"(devel) revision " + rev + " (modified) go1.26.8"},
		{"pseudo-version names its revision", debug.BuildInfo{GoVersion: "go1.26.8", Main: idem("v0.1.1-0.20261203084630-bbbb1a67cd2d+dirty"), Settings: vcs("true")},
			"v0.1.1-0.20261203084630-bbbb1a67cd2d+dirty go1.26.8"},
		{"dependency of a service (go run in go generate)", debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: "example.com/shop", Version: "(devel)"}, Settings: vcs("true"),
			Deps: []*debug.Module{{Path: "github.com/jackc/pgx/v5", Version: "v5.12.0"}, {Path: Module, Version: "v0.4.0"}}},
			"v0.4.0 go1.26.8"},
		{"replaced dependency", debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.4.0", Replace: &debug.Module{Path: "../idem"}}}},
			"v0.4.0 (replaced by ../idem) go1.26.8"},
		{"replaced by a fork", debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.4.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.4.1"}}}},
			"v0.4.0 (replaced by example.com/fork@v0.4.1) go1.26.8"},
		{"not built with idem", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/other"}}, "(devel) go1.26.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromBuildInfo(&tc.bi).String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRead: a test binary is built from idem itself, by this toolchain.
func TestRead(t *testing.T) {
	got := Read()
	if got.Version == "" || got.Version == "(unknown)" || !strings.HasPrefix(got.GoVersion, "go1.") {
		t.Fatalf("Read() = %+v", got)
	}
}
