package generator

import (
	"go/ast"
	"go/token"
	"strings"
)

// The directives idemgen reads. They are Go directive comments: "//idem:"
// with no space, at the start of a line comment.
const (
	directivePrefix  = "//idem:"
	directiveService = "service"
	directiveOp      = "op"
	directiveSkip    = "skip"
)

// directive is one parsed //idem: comment.
type directive struct {
	comment *ast.Comment
	name    string
	namePos token.Pos
	opts    []option
}

// option is one name=value word of a directive.
type option struct {
	raw      string
	name     string
	value    string
	pos      token.Pos // of the name
	valuePos token.Pos
	hasEq    bool
}

func (d *directive) String() string { return directivePrefix + d.name }

// isDirective reports whether c is an //idem: directive comment.
func isDirective(c *ast.Comment) bool {
	return strings.HasPrefix(c.Text, directivePrefix)
}

// parseDirective splits an //idem: comment into its name and options.
// Positions are exact: line comments never span lines.
func parseDirective(c *ast.Comment) *directive {
	text := c.Text
	d := &directive{comment: c}
	i := len(directivePrefix)
	j := i
	for j < len(text) && !isSpace(text[j]) {
		j++
	}
	d.name, d.namePos = text[i:j], c.Slash+token.Pos(i)
	for j < len(text) {
		for j < len(text) && isSpace(text[j]) {
			j++
		}
		k := j
		for k < len(text) && !isSpace(text[k]) {
			k++
		}
		if k == j {
			break
		}
		word := text[j:k]
		o := option{raw: word, pos: c.Slash + token.Pos(j)}
		if eq := strings.IndexByte(word, '='); eq >= 0 {
			o.name, o.value, o.hasEq = word[:eq], word[eq+1:], true
			o.valuePos = o.pos + token.Pos(eq+1)
		} else {
			o.name = word
			o.valuePos = o.pos
		}
		d.opts = append(d.opts, o)
		j = k
	}
	return d
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' }

// directivesIn returns the //idem: directives of a comment group.
func directivesIn(g *ast.CommentGroup) []*directive {
	if g == nil {
		return nil
	}
	var out []*directive
	for _, c := range g.List {
		if isDirective(c) {
			out = append(out, parseDirective(c))
		}
	}
	return out
}
