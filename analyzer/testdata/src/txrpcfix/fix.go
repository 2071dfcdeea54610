// Package txrpcfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package txrpcfix

import (
	"database/sql"
	"net/http"
)

func audit(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	//idemlint:ignore txrcp the audit hook is idempotent on its side // want `idemlint:ignore names no rule "txrcp"; did you mean txrpc\?`
	http.Post("https://audit.example", "text/plain", nil) // want `http\.Post \(called at \S+\) may do network I/O`
	return tx.Commit()
}

// timeoutfail is another rule's name, not a typo of txrpc: left alone.
func other(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	//idemlint:ignore timeoutfail not this rule
	http.Post("https://audit.example", "text/plain", nil) // want `http\.Post \(called at \S+\) may do network I/O`
	return tx.Commit()
}
