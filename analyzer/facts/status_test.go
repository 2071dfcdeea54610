package facts

import (
	"maps"
	"testing"
)

// TestSQLStatusSlots: which placeholders of a statement are written into a
// state/status column, and which statements are read at all.
func TestSQLStatusSlots(t *testing.T) {
	for _, tc := range []struct {
		name, q       string
		table         string
		slots         map[int]string
		named, parsed bool
	}{
		{"update dollar", "UPDATE payouts SET status = $2, provider_reference = $3 WHERE reference = $1",
			"payouts", map[int]string{1: "status"}, false, true},
		{"update question marks in order", "UPDATE payouts SET retries = ?, payout_state = ? WHERE id = ?",
			"payouts", map[int]string{1: "payout_state"}, false, true},
		{"cast and alias", `UPDATE public.payouts p SET "status" = $1::payout_status WHERE p.id = $2`,
			"public.payouts", map[int]string{0: "status"}, false, true},
		{"status only in the WHERE", "UPDATE payouts SET retries = retries + 1 WHERE reference = $1 AND status = $2",
			"payouts", map[int]string{}, false, true},
		{"literal status", "UPDATE payouts SET status = 'FAILED' WHERE reference = $1",
			"payouts", map[int]string{}, false, true},
		{"insert", "INSERT INTO payouts (reference, status, amount) VALUES ($1, $2, $3)",
			"payouts", map[int]string{1: "status"}, false, true},
		{"insert with a function", "INSERT INTO payouts (reference, created_at, state) VALUES (?, now(), ?)",
			"payouts", map[int]string{1: "state"}, false, true},
		{"a quoted question mark", "UPDATE payouts SET note = 'why?', status = ? WHERE id = ?",
			"payouts", map[int]string{0: "status"}, false, true},
		{"named placeholder", "UPDATE payouts SET status = @status WHERE id = @id",
			"payouts", map[int]string{}, true, true},
		{"sqlc.arg", "UPDATE payouts SET status = sqlc.arg(status) WHERE id = sqlc.arg(id)",
			"payouts", map[int]string{}, true, true},
		{"comments", "-- name: SetStatus :exec\nUPDATE payouts /* the row */ SET status = $1 WHERE id = $2",
			"payouts", map[int]string{0: "status"}, false, true},
		{"a CTE is not read", "WITH p AS (SELECT id FROM payouts) UPDATE payouts SET status = $1 FROM p WHERE payouts.id = p.id",
			"", nil, false, false},
		{"a select is not read", "SELECT status FROM payouts WHERE id = $1", "", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, slots, named, parsed := sqlStatusSlots(tc.q)
			if table != tc.table || named != tc.named || parsed != tc.parsed || !maps.Equal(slots, tc.slots) {
				t.Errorf("sqlStatusSlots(%q) = %q, %v, named %v, parsed %v; want %q, %v, named %v, parsed %v",
					tc.q, table, slots, named, parsed, tc.table, tc.slots, tc.named, tc.parsed)
			}
		})
	}
}
