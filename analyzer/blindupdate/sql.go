package blindupdate

import (
	"go/ast"
	"go/types"
	"regexp"
	"strconv"
	"strings"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// update is a parsed UPDATE that sets a state column.
type update struct {
	table  string
	column string // the state/status column it sets
	where  string // the WHERE clause, as written
	// states are the columns named like a state that it sets, in order,
	// with the value written into each (the SQL after "=").
	states   []assign
	setMarks int // the ? placeholders of the SET
}

// assign is one "column = value" of an UPDATE's SET.
type assign struct {
	column, value string
	marks         int // the ? placeholders in the SET before this value
}

var (
	reUpdate = regexp.MustCompile(`(?is)^update\s+(?:only\s+)?((?:"?\w+"?\.)?"?\w+"?)(?:\s+(?:as\s+)?\w+)?\s+set\s+(.+?)(?:\s+where\s+(.+?))?(?:\s+returning\s+.+)?\s*;?$`)
	reState  = regexp.MustCompile(`(?i)^(\w*_)?(state|status)$`)
	reGuard  = regexp.MustCompile(`(?i)state|status|version|lease|owner|lock|revision|etag|updated_at|modified|attempt|expire|seq|step|phase|worker|claim`)
	reEq     = regexp.MustCompile(`(?i)^(?:"?\w+"?\.)?"?(\w+)"?\s*=\s*(\$\d+|\?|@\w+|:\w+|'[^']*'|-?\d+|sqlc\.arg\(\s*'?\w+'?\s*\)|sqlc\.narg\(\s*'?\w+'?\s*\))$`)
	reAnd    = regexp.MustCompile(`(?i)\s+and\s+`)
	reTricky = regexp.MustCompile(`(?i)\b(or|between|exists|select|in|not|like|any|all|from|case)\b`)
	reColumn = regexp.MustCompile(`(?i)^(?:"?\w+"?\.)?"?(\w+)"?$`)
	reForUpd = regexp.MustCompile(`(?is)^select\b.*\bfrom\s+"?([\w.]+)"?.*\bfor\s+(no\s+key\s+)?update\b`)
	reFrom   = regexp.MustCompile(`(?i)\bfrom\b`)
)

func baseTable(t string) string {
	t = strings.Trim(t, `"`)
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		t = t[i+1:]
	}
	return strings.ToLower(t)
}

// stateColumn reports whether col names a state/status column.
func (c *checker) stateColumn(col string) bool {
	if reState.MatchString(col) {
		return true
	}
	for _, s := range c.cfg.StateColumns {
		if strings.EqualFold(s, col) {
			return true
		}
	}
	return false
}

// parseUpdate returns the blind state transition q makes, or nil: an
// UPDATE setting a state column, with a WHERE made only of equalities on
// columns that are not a state, version, lease or owner. Anything it cannot
// read with certainty is not blind.
func (c *checker) parseUpdate(q string) *update {
	m := reUpdate.FindStringSubmatch(q)
	if m == nil || m[3] == "" {
		return nil // not an UPDATE, or no WHERE (a bulk update, not a transition)
	}
	set, where := m[2], strings.TrimSpace(m[3])
	if reFrom.MatchString(set) {
		return nil // UPDATE .. FROM: a join decides the rows
	}
	u := &update{table: strings.ReplaceAll(m[1], `"`, ""), where: where}
	marks := 0
	for _, a := range rulekit.SplitTop(set, ',') {
		before := marks
		marks += strings.Count(a, "?")
		lhs, rhs, ok := strings.Cut(a, "=")
		if !ok {
			return nil
		}
		cm := reColumn.FindStringSubmatch(strings.TrimSpace(lhs))
		if cm == nil {
			return nil
		}
		if c.stateColumn(cm[1]) {
			if regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(cm[1]) + `\b`).MatchString(rhs) {
				return nil // SET state = CASE state WHEN ..: the new state depends on the old
			}
			if u.column == "" {
				u.column = cm[1]
			}
			u.states = append(u.states, assign{column: cm[1], value: strings.TrimSpace(rhs), marks: before})
		}
	}
	u.setMarks = marks
	if u.column == "" {
		return nil
	}
	if !c.keyOnly(where) {
		return nil
	}
	return u
}

// keyOnly reports whether where is a conjunction of equalities on columns
// that are neither a state, version, lease nor owner.
func (c *checker) keyOnly(where string) bool {
	where = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(where), ";"))
	if strings.ContainsAny(where, "()") && !strings.Contains(strings.ToLower(where), "sqlc.") {
		return false
	}
	for _, part := range reAnd.Split(where, -1) {
		part = strings.TrimSpace(part)
		if reTricky.MatchString(strings.ReplaceAll(strings.ToLower(part), "sqlc.", "")) {
			return false
		}
		m := reEq.FindStringSubmatch(part)
		if m == nil {
			return false // >, <, IS NULL, functions: a guard we cannot read
		}
		if reGuard.MatchString(m[1]) || c.stateColumn(m[1]) {
			return false
		}
	}
	return true
}

// gormWhere reports whether a gorm Where condition written as SQL is key only.
func (c *checker) gormWhere(q string) bool { return c.keyOnly(q) }

var (
	reBoolLit = regexp.MustCompile(`(?i)^(true|false)$`)
	reDollar  = regexp.MustCompile(`^\$(\d+)$`)
)

// flagValue reports whether the value a SET writes into a column named
// like a state is a boolean: a SQL boolean literal, or a placeholder bound
// to a Go bool (bool, *bool, sql.NullBool or another type named like a
// nullable bool) among call's arguments, after the SQL text at index qi.
// A boolean is a flag (an authenticator's backup state, a read status),
// not a workflow state: writing it blind overwrites no transition.
// Anything it cannot bind (named parameters, arguments spread from a
// slice) is not known to be a flag.
func flagValue(info *types.Info, call *ast.CallExpr, qi int, a assign) bool {
	v := a.value
	if reBoolLit.MatchString(v) {
		return true
	}
	if call == nil || qi < 0 || call.Ellipsis.IsValid() {
		return false
	}
	arg := -1
	switch {
	case v == "?":
		arg = qi + 1 + a.marks
	case reDollar.MatchString(v):
		n, err := strconv.Atoi(reDollar.FindStringSubmatch(v)[1])
		if err != nil || n < 1 {
			return false
		}
		arg = qi + n
	}
	if arg < 0 || arg >= len(call.Args) {
		return false
	}
	return boolType(info.TypeOf(call.Args[arg]))
}

// boolType: t is a bool, a pointer to one, or a struct named like a
// nullable bool (sql.NullBool, pgtype.Bool, null.Bool) whose fields
// include a bool.
func boolType(t types.Type) bool {
	if t == nil {
		return false
	}
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	if b, ok := t.Underlying().(*types.Basic); ok {
		return b.Kind() == types.Bool || b.Kind() == types.UntypedBool
	}
	st, ok := t.Underlying().(*types.Struct)
	if !ok {
		return false
	}
	if _, name := rulekit.NamedOf(t); !strings.HasSuffix(name, "Bool") {
		return false
	}
	for i := 0; i < st.NumFields(); i++ {
		if b, ok := st.Field(i).Type().Underlying().(*types.Basic); ok && b.Kind() == types.Bool {
			return true
		}
	}
	return false
}

// dropFlags keeps, of u's state columns, those not shown to hold a flag
// by call (see flagValue); u.column becomes the first kept. It returns nil
// when every one holds a flag.
func dropFlags(info *types.Info, call *ast.CallExpr, qi int, u *update) *update {
	if u == nil {
		return nil
	}
	for _, a := range u.states {
		if !flagValue(info, call, qi, a) {
			u.column = a.column
			return u
		}
	}
	if len(u.states) == 0 {
		return u // a state found otherwise (never from a SET): keep it
	}
	return nil
}
