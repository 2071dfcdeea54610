package blindupdate

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"reflect"
	"regexp"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

const (
	pkgGorm    = "gorm.io/gorm"
	pkgOptLock = "gorm.io/plugin/optimisticlock"
)

var reField = regexp.MustCompile(`(?i)(state|status)$`)

// gormCall reports a gorm Update/Updates/UpdateColumn(s) of a state field of
// a model, whose chain conditions name only the key (Model(&x) with its
// primary key, or Where on key columns), with RowsAffected never read.
func (c *checker) gormCall(call *ast.CallExpr, stack rulekit.Stack) {
	info := c.pass.TypesInfo
	fn := rulekit.Callee(info, call)
	if !rulekit.Is(fn, pkgGorm, "Update", "Updates", "UpdateColumn", "UpdateColumns") {
		return
	}
	if _, rn := rulekit.RecvNamed(fn); rn != "DB" {
		return
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok || len(call.Args) == 0 {
		return
	}
	// The state field being set.
	field := ""
	switch fn.Name() {
	case "Update", "UpdateColumn":
		if s, _, ok := rulekit.ConstString(info, call.Args[0]); ok && c.stateField(s) &&
			!(len(call.Args) == 2 && boolType(info.TypeOf(call.Args[1]))) {
			field = s // a bool value is a flag, not a state
		}
	default:
		field = c.stateInLiteral(call.Args[0])
	}
	if field == "" {
		return
	}
	// The chain: Model, Where, Table, Clauses ... back to a *gorm.DB value.
	var model ast.Expr
	var where []string
	var modelPos token.Pos
	for x := sel.X; ; {
		k, ok := ast.Unparen(x).(*ast.CallExpr)
		if !ok {
			break
		}
		kf := rulekit.Callee(info, k)
		ks, ok := ast.Unparen(k.Fun).(*ast.SelectorExpr)
		if kf == nil || !ok || rulekit.PkgPath(kf) != pkgGorm {
			return // a helper we do not read
		}
		switch kf.Name() {
		case "Model":
			if len(k.Args) == 1 {
				model, modelPos = k.Args[0], k.Pos()
			}
		case "Where":
			if len(k.Args) == 0 {
				return
			}
			s, _, ok := rulekit.ConstString(info, k.Args[0])
			if !ok {
				return // a struct or map condition: may hold the state
			}
			where = append(where, s)
		case "WithContext", "Table", "Select", "Omit", "Session", "Debug":
		default:
			return // Clauses (locking, returning), Not, Or, scopes: not blind for sure
		}
		x = ks.X
	}
	if model == nil {
		return
	}
	mt := c.modelStruct(info.TypeOf(model))
	if mt == nil || !c.hasStateField(mt) || hasOptimisticLock(mt) {
		return
	}
	for _, w := range where {
		if !c.gormWhere(w) {
			return
		}
	}
	if c.resultUse(call, stack, true) != ignored || c.lockedBefore(stack, call, "*") {
		return
	}
	cond := "the model's primary key"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	msg := fmt.Sprintf("gorm %s at %s sets %s of %s with only %s as condition and never reads RowsAffected: a state transition without compare-and-set, "+
		"so a duplicate or a late worker overwrites a state another one already moved on and nothing notices; "+
		"add the expected state to the chain and check one row changed: res := db.Model(&x).Where(\"%s = ?\", expected).%s(...); res.Error == nil && res.RowsAffected == 1 "+
		"(or add an optimisticlock.Version field)",
		fn.Name(), c.rep.Posn(sel.Sel.Pos()), field, types.TypeString(mt, types.RelativeTo(c.pass.Pkg)), cond, rulekit.Snake(field), fn.Name())
	c.rep.Report(analysis.Diagnostic{Pos: sel.Sel.Pos(), End: call.End(), Message: msg, Related: []analysis.RelatedInformation{
		{Pos: modelPos, Message: "the model whose state is set"},
		{Pos: call.Args[0].Pos(), Message: "the state field: " + field},
	}})
}

func (c *checker) stateField(s string) bool {
	return reField.MatchString(s) || c.stateColumn(s) || c.stateColumn(rulekit.Snake(s))
}

// stateInLiteral returns the state field set by an Updates argument: a map
// literal with a constant state key, or a struct literal with a state field.
func (c *checker) stateInLiteral(e ast.Expr) string {
	if u, ok := ast.Unparen(e).(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	lit, ok := ast.Unparen(e).(*ast.CompositeLit)
	if !ok {
		return ""
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if boolType(c.pass.TypesInfo.TypeOf(kv.Value)) {
			continue // a flag, not a state
		}
		switch k := kv.Key.(type) {
		case *ast.Ident:
			if c.stateField(k.Name) {
				return k.Name
			}
		default:
			if s, _, ok := rulekit.ConstString(c.pass.TypesInfo, k); ok && c.stateField(s) {
				return s
			}
		}
	}
	return ""
}

func (c *checker) modelStruct(t types.Type) *types.Named {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return nil
	}
	if _, ok := n.Underlying().(*types.Struct); !ok {
		return nil
	}
	return n
}

func (c *checker) hasStateField(n *types.Named) bool {
	st := n.Underlying().(*types.Struct)
	for i := 0; i < st.NumFields(); i++ {
		f := st.Field(i)
		if boolType(f.Type()) {
			continue // a flag named like a state (BackupState bool)
		}
		if c.stateField(f.Name()) {
			return true
		}
		if tag := reflectTag(st.Tag(i), "column"); tag != "" && c.stateColumn(tag) {
			return true
		}
	}
	return false
}

func hasOptimisticLock(n *types.Named) bool {
	st := n.Underlying().(*types.Struct)
	for i := 0; i < st.NumFields(); i++ {
		if p, name := rulekit.NamedOf(st.Field(i).Type()); p == pkgOptLock && name == "Version" {
			return true
		}
	}
	return false
}

// reflectTag returns the gorm tag option key of tag (`gorm:"column:x"`).
func reflectTag(tag, key string) string {
	for _, part := range strings.Split(reflect.StructTag(tag).Get("gorm"), ";") {
		if k, val, ok := strings.Cut(part, ":"); ok && strings.EqualFold(strings.TrimSpace(k), key) {
			return strings.TrimSpace(val)
		}
	}
	return ""
}
