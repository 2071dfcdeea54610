// Package c is the leaf of a cross-package chain: a -> b -> c -> net/http.
package c

import (
	"bytes"
	"context"
	"database/sql"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostJSON posts body to url.
func PostJSON(url string, body []byte) error {
	resp, err := http.DefaultClient.Do(mustReq(url, body))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func mustReq(url string, body []byte) *http.Request {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	return req
}

// Checksum does no I/O.
func Checksum(b []byte) int {
	n := 0
	for _, x := range b {
		n += int(x)
	}
	return n
}

// OpenTx begins a transaction for its caller (a begin helper).
func OpenTx(db *sql.DB) (*sql.Tx, error) { return db.Begin() }

// StartTx begins a pgx transaction for its caller.
func StartTx(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx, nil
}
