// Package cfg is checked with configured network functions and runners.
package cfg

import (
	"context"
	"database/sql"
)

// Gateway is an interface: idemlint cannot see its implementations, so it
// is configured with -netfuncs=(cfg.Gateway).Charge.
type Gateway interface {
	Charge(ctx context.Context, id string) error
	Quote(ctx context.Context, id string) (int, error)
}

// Store runs fn atomically: configured with -txrunners=(cfg.Store).Atomically.
type Store interface {
	Atomically(ctx context.Context, fn func(ctx context.Context) error) error
	Later(ctx context.Context, fn func(ctx context.Context) error) error
}

func configuredNet(ctx context.Context, db *sql.DB, gw Gateway) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := gw.Charge(ctx, "1"); err != nil { // want `\(cfg\.Gateway\)\.Charge \(called at \S+\) may do network I/O`
		return err
	}
	gw.Quote(ctx, "1") // not configured
	return tx.Commit()
}

func configuredRunner(ctx context.Context, st Store, gw Gateway) error {
	return st.Atomically(ctx, func(ctx context.Context) error {
		return gw.Charge(ctx, "1") // want `\(cfg\.Gateway\)\.Charge \(called at \S+\) may do network I/O`
	})
}

func notConfiguredRunner(ctx context.Context, st Store, gw Gateway) error {
	return st.Later(ctx, func(ctx context.Context) error {
		return gw.Charge(ctx, "1")
	})
}
