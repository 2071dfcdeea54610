package rulekit

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"testing"
)

// TestStringText: the text of the argument of use(..) in each body, or
// none when the code does not determine it.
func TestStringText(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string
		ok         bool
	}{
		{"constant", `use(table)`, "payouts", true},
		{"local", `q := "UPDATE " + table; use(q)`, "UPDATE payouts", true},
		{"var declaration", `var q = "SELECT 1"; use(q)`, "SELECT 1", true},
		{"appended in the block", `q := "a"; q += "b"; q += table; use(q)`, "abpayouts", true},
		{"built from another local", `a := "x"; b := a + "y"; use(b)`, "xy", true},
		{"assigned on a path", `q := "a"; if cond { q = "b" }; use(q)`, "", false},
		{"appended on a path", `q := "a"; if cond { q += "b" }; use(q)`, "", false},
		{"appended after the use", `q := "a"; use(q); q += "b"; _ = q`, "", false},
		{"appended in a loop", `q := "a"; for range 3 { use(q); q += "b" }`, "", false},
		{"defined in the loop", `for range 3 { q := "a"; use(q) }`, "a", true},
		{"appended in a closure", `q := "a"; f := func() { q += "b" }; f(); use(q)`, "", false},
		{"address taken", `q := "a"; p := &q; *p = "b"; use(q)`, "", false},
		{"a parameter", `use(s)`, "", false},
		{"a call", `use(mk())`, "", false},
		{"package variable", `use(pkgVar)`, "UPDATE payouts", true},
		{"package variable written", `use(written)`, "", false},
		{"package struct field", `use(qs.a)`, "A", true},
		{"local struct field", `q := query{sql: "S"}; use(q.sql)`, "S", true},
		{"local struct pointer field", `q := &query{sql: "S"}; use(q.sql)`, "S", true},
		{"local struct field written", `q := query{sql: "S"}; q.sql = "T"; use(q.sql)`, "", false},
		{"local struct pointer handed out", `q := &query{sql: "S"}; touch(q); use(q.sql)`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := `package p

const table = "payouts"

var pkgVar = "UPDATE " + table

var written = "a"

func W() { written = "b" }

type query struct{ sql string }

var qs = struct{ a string }{a: "A"}

func use(string)      {}
func mk() string      { return "" }
func touch(q *query)  {}

func f(cond bool, s string) {
	` + tc.body + `
}
`
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", src, 0)
			if err != nil {
				t.Fatal(err)
			}
			info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
				Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
			conf := types.Config{Importer: importer.Default()}
			if _, err := conf.Check("p", fset, []*ast.File{f}, info); err != nil {
				t.Fatal(err)
			}
			var arg ast.Expr
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "use" && arg == nil {
						arg = c.Args[0]
					}
				}
				return true
			})
			got, _, ok := StringText(info, []*ast.File{f}, arg)
			if got != tc.want || ok != tc.ok {
				t.Errorf("StringText = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
