package blindupdate

import (
	"regexp"
	"strings"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// update is a parsed UPDATE that sets a state column.
type update struct {
	table  string
	column string // the state/status column it sets
	where  string // the WHERE clause, as written
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
	for _, a := range rulekit.SplitTop(set, ',') {
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
		}
	}
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
