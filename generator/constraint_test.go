package generator

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFileConstraint(t *testing.T) {
	for _, tt := range []struct {
		name, src, want string
	}{
		{"plain.go", "package p\n", ""},
		{"linux.go", "package p\n", ""}, // a name with no prefix implies nothing
		{"pay_linux.go", "package p\n", "linux"},
		{"pay_amd64.go", "package p\n", "amd64"},
		{"pay_linux_arm64.go", "package p\n", "linux && arm64"},
		{"pay_linux_test.go", "package p\n", "linux"},
		{"pay_unix.go", "package p\n", ""}, // unix is a tag, never a name suffix
		{"pay.go", "//go:build premium\n\npackage p\n", "premium"},
		{"pay.go", "// Copyright.\n\n//go:build premium || (!free && go1.22)\n\npackage p\n", "premium || (!free && go1.22)"},
		{"pay_windows.go", "//go:build premium\n\npackage p\n", "premium && windows"},
		{"pay.go", "// +build premium free\n// +build !legacy\n\npackage p\n", "(premium || free) && !legacy"},
		{"pay.go", "package p\n\n//go:build premium\n", ""}, // after the package clause: a comment
	} {
		path := filepath.Join(t.TempDir(), tt.name)
		if err := os.WriteFile(path, []byte(tt.src), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := constraintText(fileConstraint(path, nil)); got != tt.want {
			t.Errorf("%s %q: %q, want %q", tt.name, tt.src, got, tt.want)
		}
	}
}

func TestWrapperConstraint(t *testing.T) {
	for build, want := range map[string]string{
		"":                 "//go:build !idemgen",
		"premium":          "//go:build !idemgen && premium",
		"linux && arm64":   "//go:build !idemgen && linux && arm64",
		"premium || free":  "//go:build !idemgen && (premium || free)",
		"!(premium || go)": "//go:build !idemgen && !(premium || go)",
	} {
		got := wrapperConstraint(build)
		if got != want {
			t.Errorf("wrapperConstraint(%q) = %q, want %q", build, got, want)
		}
		path := filepath.Join(t.TempDir(), "w_idem.go")
		if err := os.WriteFile(path, []byte(Header+"\n\n"+got+"\n\npackage p\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if back := generatedFor(path); back != build {
			t.Errorf("generatedFor(%q) = %q, want %q", got, back, build)
		}
	}
}

// sourceHeaderConstraint reads a file's constraint as go/build does.
func TestSourceHeaderConstraint(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"go:build", "//go:build linux\n\npackage m\n", "linux"},
		{"+build then blank line", "// +build linux\n\npackage m\n", "linux"},
		{"+build lines anded", "// +build linux\n// +build amd64\n\npackage m\n", "linux && amd64"},
		{"go:build wins", "//go:build darwin\n// +build linux\n\npackage m\n", "darwin"},
		{"+build in the doc comment", "// +build linux\npackage m\n", ""},
		{"+build above a block comment", "// +build premium\n/* Copyright */\n\npackage m\n", ""},
		{"+build after a blank line and a block comment", "// +build premium\n\n/* Copyright */\n\npackage m\n", "premium"},
		{"go:build after a block comment", "/* Copyright */\n//go:build premium\n\npackage m\n", "premium"},
		{"go:build inside a block comment", "/*\n//go:build premium\n*/\n\npackage m\n", ""},
		{"after the package clause", "package m\n\n//go:build premium\n", ""},
		{"none", "package m\n", ""},
		{"a BOM first", "\ufeff// +build linux\n\npackage m\n", "linux"},
		{"CRLF", "// +build linux\r\n\r\npackage m\r\n", "linux"},
		{"CRLF, no blank line", "// +build linux\r\npackage m\r\n", ""},
	} {
		got := ""
		if x := sourceHeaderConstraint([]byte(tc.src)); x != nil {
			got = x.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
