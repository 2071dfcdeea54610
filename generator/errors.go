package generator

import (
	"cmp"
	"fmt"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
)

// An Error is one problem found in the annotated source, at a position.
type Error struct {
	Pos token.Position
	Msg string
}

func (e Error) Error() string {
	if !e.Pos.IsValid() {
		return e.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.Pos.Filename, e.Pos.Line, e.Pos.Column, e.Msg)
}

// ErrorList is every problem found, sorted by position. It is the error
// that [Generate] returns when the source has problems; nothing is generated
// then.
type ErrorList []Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Relative returns l with file names relative to dir where they are below it.
func (l ErrorList) Relative(dir string) ErrorList {
	out := make(ErrorList, len(l))
	for i, e := range l {
		if rel, err := filepath.Rel(dir, e.Pos.Filename); err == nil && filepath.IsAbs(e.Pos.Filename) && !strings.HasPrefix(rel, "..") {
			e.Pos.Filename = rel
		}
		out[i] = e
	}
	return out
}

func (l ErrorList) sorted() ErrorList {
	l = slices.Clone(l)
	slices.SortStableFunc(l, func(a, b Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.Filename, b.Pos.Filename),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	// Drop exact duplicates (a position can be reached twice, for example
	// through a package listed by two patterns).
	return slices.CompactFunc(l, func(a, b Error) bool { return a == b })
}

// errs collects errors.
type errs struct {
	fset *token.FileSet
	list ErrorList
}

func (e *errs) at(pos token.Pos, format string, args ...any) {
	e.list = append(e.list, Error{Pos: e.fset.Position(pos), Msg: fmt.Sprintf(format, args...)})
}
