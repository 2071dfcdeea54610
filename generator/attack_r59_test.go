package generator

import (
	"go/build"
	"os"
	"path/filepath"
	"testing"
)

// docs/idemgen.md, "Services in build-constrained files": "A service
// declared in a file with a build constraint, a //go:build line, ...
// exists only in the builds that file is in. Its wrapper carries the same
// constraint (//go:build !idemgen && premium for a file under
// //go:build premium ...)". The go command drops a leading UTF-8 byte
// order mark before reading a file's header (go/build's importReader, and
// cmd/go's modindex): a file that starts with a BOM and //go:build premium
// is in premium builds only. idemgen reads the header from the raw bytes,
// where the line starts with U+FEFF, not "//": it sees no constraint, and
// the service's wrapper is generated under //go:build !idemgen alone, so a
// build without premium has a constructor for an interface it lacks and
// does not compile.
func TestR59ConstraintAfterByteOrderMark(t *testing.T) {
	const bom = "\ufeff"
	for _, src := range []string{
		bom + "//go:build premium\n\npackage p\n\ntype Payments interface{}\n",
		bom + "// +build premium\n\npackage p\n\ntype Payments interface{}\n",
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "pay.go")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ctxt := build.Default
		ctxt.BuildTags = nil
		goIn, err := ctxt.MatchFile(dir, "pay.go")
		if err != nil {
			t.Fatal(err)
		}
		x := fileConstraint(path, nil)
		idemgenIn := x == nil || x.Eval(func(tag string) bool { return tag == ctxt.GOOS || tag == ctxt.GOARCH })
		t.Logf("%q: go command builds it without tags: %v; idemgen's constraint %q", src[:25], goIn, constraintText(x))
		if goIn != idemgenIn {
			t.Errorf("%q: the go command leaves the file out of a build without premium (in: %v), idemgen reads constraint %q (wrapper %q)",
				src, goIn, constraintText(x), wrapperConstraint(constraintText(x)))
		}
	}
}
