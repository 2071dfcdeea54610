// Package version reports which version of the idem module a command was
// built from, for idemlint -version, idemgen -version and idemctl version.
//
// The version comes from the build information the go command stamps into
// every binary (runtime/debug.ReadBuildInfo):
//
//   - go install github.com/idemkit/idem/cmd/idemlint@v0.4.0 builds idem as
//     the main module at v0.4.0: "v0.4.0".
//   - go run github.com/idemkit/idem/cmd/idemgen inside another module (the
//     go generate line), or go tool idemgen, builds idem as a dependency: the
//     version that module requires, and the replacement if it has one.
//   - a build in a checkout: the go command's version for it. With VCS
//     stamping (go build in a git clone) that is a pseudo-version holding
//     the revision, "+dirty" when the tree has changes; without it (go run,
//     -buildvcs=false, a git worktree) "(devel)", followed by the revision
//     when the build recorded one.
package version

import (
	"runtime/debug"
	"strings"
)

// Module is the idem module's path.
const Module = "github.com/idemkit/idem"

// Info is what a binary knows about the idem module it was built from.
type Info struct {
	// Version is the module version ("v0.4.0", a pseudo-version, or
	// "(devel)" for a build in a checkout the go command gave no version).
	Version string
	// Replace is the path (a directory or another module) that replaced the
	// idem module in the build, when one did.
	Replace string
	// Revision and Modified are the VCS revision of a build in a checkout
	// and whether its tree had uncommitted changes; empty and false when the
	// build recorded no VCS information.
	Revision string
	Modified bool
	// GoVersion is the toolchain that built the binary ("go1.26.8").
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo returns the Info of the idem module in bi: the main module
// when the binary was built from idem itself, else idem among its
// dependencies.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{GoVersion: bi.GoVersion}
	if bi.Main.Path == Module {
		info.Version = bi.Main.Version
		// VCS settings describe the main module's checkout: only then are
		// they idem's.
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	} else {
		for _, d := range bi.Deps {
			if d.Path != Module {
				continue
			}
			info.Version = d.Version
			if d.Replace != nil {
				info.Replace = d.Replace.Path
				if d.Replace.Version != "" {
					info.Replace += "@" + d.Replace.Version
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// String is the version line's text after the command's name:
//
//	v0.4.0 go1.26.8
//	v0.4.1-0.20261203084630-bbbb1a67cd2d+dirty go1.26.8
//	(devel) revision bbbb1a67cd2da1d3cac4952c4b0c8f319b9a7ea8 (modified) go1.26.8
//	v0.4.0 (replaced by ../idem) go1.26.8
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	// A pseudo-version already names its revision (its first 12 digits).
	if i.Revision != "" && !strings.Contains(i.Version, short(i.Revision)) {
		b.WriteString(" revision " + i.Revision)
		if i.Modified {
			b.WriteString(" (modified)")
		}
	}
	if i.Replace != "" {
		b.WriteString(" (replaced by " + i.Replace + ")")
	}
	if i.GoVersion != "" {
		b.WriteString(" " + i.GoVersion)
	}
	return b.String()
}

// short is a revision's prefix as pseudo-versions hold it.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
