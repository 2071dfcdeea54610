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

// TestURIOS maps the URIs of Windows and POSIX clients to paths and back:
// the three spellings of a drive (C:, c:, the colon percent-encoded as VS
// Code sends it) name one path, and the path's URI maps to it again.
func TestURIOS(t *testing.T) {
	for _, tt := range []struct {
		uri     string
		windows bool
		path    string // "" when the URI is refused
		back    string // pathToURIOS(path)
	}{
		{"file:///C:/Users/me/shop/a.go", true, `C:\Users\me\shop\a.go`, "file:///C:/Users/me/shop/a.go"},
		{"file:///c%3A/Users/me/shop/a.go", true, `C:\Users\me\shop\a.go`, "file:///C:/Users/me/shop/a.go"},
		{"file:///c:/Users/me/shop/a.go", true, `C:\Users\me\shop\a.go`, "file:///C:/Users/me/shop/a.go"},
		{"file:///d%3a/My%20Docs/x/../%C3%A9.go", true, `D:\My Docs\é.go`, "file:///D:/My%20Docs/%C3%A9.go"},
		{"file:///C:/", true, `C:\`, "file:///C:/"},
		{"file://server/share/shop/a.go", true, `\\server\share\shop\a.go`, "file://server/share/shop/a.go"},
		{"file:///Users/me/a.go", true, "", ""},
		{"file:///C:relative.go", true, "", ""},
		{"file:///tmp/a%20b/c.go", false, "/tmp/a b/c.go", "file:///tmp/a%20b/c.go"},
		{"file://localhost/tmp/c.go", false, "/tmp/c.go", "file:///tmp/c.go"},
		{"file:///C:/Users/me/a.go", false, "/C:/Users/me/a.go", "file:///C:/Users/me/a.go"},
		{"file://server/share/a.go", false, "", ""},
	} {
		got, err := uriToPathOS(tt.uri, tt.windows)
		if tt.path == "" {
			if err == nil {
				t.Errorf("%s (windows %v): got %q, want an error", tt.uri, tt.windows, got)
			}
			continue
		}
		if err != nil || got != tt.path {
			t.Errorf("%s (windows %v): got %q, %v, want %q", tt.uri, tt.windows, got, err, tt.path)
			continue
		}
		back := pathToURIOS(got, tt.windows)
		if back != tt.back {
			t.Errorf("%s (windows %v): path %q back to %q, want %q", tt.uri, tt.windows, got, back, tt.back)
		}
		if again, err := uriToPathOS(back, tt.windows); err != nil || again != got {
			t.Errorf("%s (windows %v): %q maps to %q, %v, not %q", tt.uri, tt.windows, back, again, err, got)
		}
	}
}

// TestURIOfClient: the server answers with the URI the client named a
// file with (a Windows client's "c%3A" stays "c%3A"), and with
// pathToURI's spelling for files the client never named.
func TestURIOfClient(t *testing.T) {
	s := &server{uris: map[string]string{}}
	const uri = "file:///c%3A/Users/me/shop/a.go"
	path, err := uriToPathOS(uri, true)
	if err != nil {
		t.Fatal(err)
	}
	s.remember(path, uri)
	if got := s.uriOf(path); got != uri {
		t.Errorf("uriOf(%q) = %q, want the client's %q", path, got, uri)
	}
	other := filepath.Join(t.TempDir(), "b.go")
	if got, want := s.uriOf(other), pathToURI(other); got != want {
		t.Errorf("uriOf(%q) = %q, want %q", other, got, want)
	}
}
