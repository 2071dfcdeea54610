package lsp

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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

// uriToPath returns the absolute path of a file: URI.
func uriToPath(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("invalid URI %q: %w", uri, err)
	}
	if u.Scheme != "file" {
		return "", fmt.Errorf("URI %q: only file: URIs are served", uri)
	}
	p := filepath.FromSlash(u.Path)
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("URI %q: not an absolute path", uri)
	}
	return filepath.Clean(p), nil
}

// pathToURI is the file: URI of an absolute path.
func pathToURI(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
