// Package rep repeats one finding of each of blindupdate, checkthenact,
// serverkey and bypass 6 times, in identical code: the shape a service's
// repository layer has, and what golangci-lint's default issue filters
// (max-same-issues 3, max-issues-per-linter 50) must not thin out.
package rep

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"time"

	"impl"
	"pay"
)

func MarkPaid1(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim1(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post1(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge1(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

func MarkPaid2(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim2(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post2(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge2(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

func MarkPaid3(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim3(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post3(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge3(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

func MarkPaid4(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim4(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post4(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge4(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

func MarkPaid5(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim5(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post5(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge5(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

func MarkPaid6(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim6(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post6(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge6(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}
