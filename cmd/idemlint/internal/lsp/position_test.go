package lsp

import (
	"os"
	"path/filepath"
	"testing"
)

// TestConverter turns go/token byte columns into UTF-16 and UTF-8 LSP
// characters on lines with multi-byte runes.
func TestConverter(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.go")
	// "é" is 2 bytes and 1 UTF-16 unit; "😀" is 4 bytes and 2 units.
	src := "package a\n\nvar s = \"é😀\" + f()\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		line, col   int
		utf8        bool
		wantL, want int
	}{
		{"ASCII", 1, 9, false, 0, 8},
		{"after é and 😀 (UTF-16)", 3, 19, false, 2, 15},
		{"after é and 😀 (UTF-8)", 3, 19, true, 2, 18},
		{"past the line end", 3, 24, false, 2, 20},
		{"no column", 3, 0, false, 2, 0},
		{"no line", 0, 0, false, 0, 0},
		{"past the file", 9, 3, false, 8, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newConverter(tt.utf8).position(file, tt.line, tt.col)
			if p.Line != tt.wantL || p.Character != tt.want {
				t.Errorf("%d:%d: got %d:%d, want %d:%d", tt.line, tt.col, p.Line, p.Character, tt.wantL, tt.want)
			}
		})
	}
}

func TestURI(t *testing.T) {
	for _, path := range []string{"/tmp/a b/c.go", "/tmp/é/#x.go"} {
		got, err := uriToPath(pathToURI(path))
		if err != nil || got != path {
			t.Errorf("%s: round trip gave %q, %v", path, got, err)
		}
	}
	for _, uri := range []string{"untitled:Untitled-1", "file://host/%zz", "relative.go"} {
		if _, err := uriToPath(uri); err == nil {
			t.Errorf("%s: no error", uri)
		}
	}
}
