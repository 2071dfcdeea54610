package lsp

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// converter turns go/token positions (1-based lines, byte columns) into
// LSP positions (0-based lines, UTF-16 or byte columns), reading each file
// once.
type converter struct {
	utf8  bool
	lines map[string][]string
}

func newConverter(utf8 bool) *converter {
	return &converter{utf8: utf8, lines: map[string][]string{}}
}

func (c *converter) position(file string, line, col int) position {
	if line < 1 {
		return position{}
	}
	p := position{Line: line - 1}
	if col < 1 {
		return p
	}
	if c.utf8 {
		p.Character = col - 1
		return p
	}
	lines, ok := c.lines[file]
	if !ok {
		if data, err := os.ReadFile(file); err == nil {
			lines = strings.Split(string(data), "\n")
		}
		c.lines[file] = lines
	}
	if line > len(lines) {
		p.Character = col - 1
		return p
	}
	text := lines[line-1]
	if col-1 < len(text) {
		text = text[:col-1]
	}
	n := 0
	for len(text) > 0 {
		r, size := utf8.DecodeRuneInString(text)
		text = text[size:]
		n += len(utf16.Encode([]rune{r}))
	}
	// A column past the line's end (the newline itself) keeps its offset.
	p.Character = n + max(0, col-1-len(lines[line-1]))
	return p
}

func (c *converter) lspRange(s Span) lspRange {
	start := c.position(s.File, s.Line, s.Col)
	end := start
	if s.EndLine > 0 {
		end = c.position(s.File, s.EndLine, s.EndCol)
	}
	return lspRange{Start: start, End: end}
}

// line returns a file's line (1-based), "" when out of range.
func (c *converter) line(file string, line int) string {
	c.position(file, line, 2) // loads the file
	lines := c.lines[file]
	if line < 1 || line > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[line-1], "\r")
}

// reGoModPos is a go.mod position in the go command's error output.
var reGoModPos = regexp.MustCompile(`(?m)^(\S*go\.mod):(\d+)(?::(\d+))?: `)

// goModSpan returns the go.mod line an error of the go command names, or
// the start of gomod.
func goModSpan(msg, gomod string) Span {
	if m := reGoModPos.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		return Span{File: gomod, Line: line, Col: col}
	}
	return Span{File: gomod, Line: 1, Col: 1}
}

// onWindows: file paths are Windows paths (a drive letter or a UNC
// share, backslashes).
var onWindows = runtime.GOOS == "windows"

// uriToPath returns the absolute path of a file: URI on this machine.
func uriToPath(uri string) (string, error) { return uriToPathOS(uri, onWindows) }

// pathToURI is the file: URI of an absolute path on this machine. The
// server answers with the URI the client used for a file when it knows
// it (see server.uriOf): this is the spelling for files it never named.
func pathToURI(path string) string { return pathToURIOS(path, onWindows) }

// uriToPathOS returns the absolute path of a file: URI, as a Windows path
// when windows is set: "file:///C:/a/b.go", "file:///c%3A/a/b.go" (VS
// Code's spelling, the drive colon percent-encoded) and "file:///c:/a/b.go"
// are all C:\a\b.go (the drive letter upper-cased, as gopls does, so that
// the three name one file), and "file://host/share/b.go" is the UNC path
// \\host\share\b.go. Elsewhere the URI's path is the file's path.
func uriToPathOS(uri string, windows bool) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("invalid URI %q: %w", uri, err)
	}
	if u.Scheme != "file" {
		return "", fmt.Errorf("URI %q: only file: URIs are served", uri)
	}
	if !windows {
		if u.Host != "" && u.Host != "localhost" {
			return "", fmt.Errorf("URI %q: a file on another host (%s)", uri, u.Host)
		}
		p := filepath.FromSlash(u.Path)
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("URI %q: not an absolute path", uri)
		}
		return filepath.Clean(p), nil
	}
	p := u.Path // decoded: %3A is ':'
	switch {
	case u.Host != "" && u.Host != "localhost":
		if len(p) < 2 || p[0] != '/' {
			return "", fmt.Errorf("URI %q: no share on host %s", uri, u.Host)
		}
		return `\\` + u.Host + strings.ReplaceAll(path.Clean(p), "/", `\`), nil
	case len(p) >= 3 && p[0] == '/' && isDrive(p[1]) && p[2] == ':' && (len(p) == 3 || p[3] == '/'):
		clean := path.Clean("/" + p[3:]) // the path on the drive, from its root
		return strings.ToUpper(p[1:2]) + ":" + strings.ReplaceAll(clean, "/", `\`), nil
	}
	return "", fmt.Errorf("URI %q: not an absolute Windows path (no drive letter or share)", uri)
}

// pathToURIOS is the file: URI of an absolute path, a Windows path when
// windows is set ("C:\a\b.go" is "file:///C:/a/b.go", a UNC path
// "\\host\share\b.go" is "file://host/share/b.go").
func pathToURIOS(p string, windows bool) string {
	if !windows {
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
	}
	slash := strings.ReplaceAll(p, `\`, "/")
	if host, rest, ok := strings.Cut(strings.TrimPrefix(slash, "//"), "/"); ok && strings.HasPrefix(slash, "//") {
		return (&url.URL{Scheme: "file", Host: host, Path: "/" + rest}).String()
	}
	return (&url.URL{Scheme: "file", Path: "/" + slash}).String()
}

func isDrive(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
