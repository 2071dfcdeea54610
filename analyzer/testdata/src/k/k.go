package k

import (
	"context"
	"database/sql"
	"errors"
	"net/http"

	"kb"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

type ChargeRequest struct {
	IdempotencyKey string
	UserID         string
}
type ChargeReply struct{ OK bool }

type PaymentClient interface {
	Charge(ctx context.Context, in *ChargeRequest, opts ...grpc.CallOption) (*ChargeReply, error)
}

var ErrDuplicate = errors.New("duplicate")

func tokenKey(key string) string { return "idem:" + key }

// 1. Del, then the effect.
func delFirst(ctx context.Context, rdb *redis.Client, key string) error {
	if n, _ := rdb.Del(ctx, "idem:"+key).Result(); n == 0 { // want `the idempotency token is deleted at \S+ \(\(redis\.cmdable\)\.Del\) before the effect it guards \(http\.Post at k\.go:\d+:\d+, [^)]*\).*claim the token atomically with a PROCESSING state`
		return ErrDuplicate
	}
	_, err := http.Post("https://pay.example/charge", "text/plain", nil)
	return err
}

// 1'. claimed with SET NX, the effect, then the outcome recorded.
func delFirstOK(ctx context.Context, rdb *redis.Client, key string) error {
	if ok, _ := rdb.SetNX(ctx, "idem:"+key, "PROCESSING", 0).Result(); !ok {
		return ErrDuplicate
	}
	_, err := http.Post("https://pay.example/charge", "text/plain", nil)
	rdb.Set(ctx, "idem:"+key, "DONE", 0)
	return err
}

// 2. GetDel of a token key built by a helper, then a gRPC effect.
func getDel(ctx context.Context, rdb *redis.Client, pc PaymentClient, key string) error {
	if _, err := rdb.GetDel(ctx, tokenKey(key)).Result(); err != nil { // want `deleted at \S+ \(\(redis\.cmdable\)\.GetDel\) before the effect it guards \(\(k\.PaymentClient\)\.Charge`
		return ErrDuplicate
	}
	_, err := pc.Charge(ctx, &ChargeRequest{IdempotencyKey: key})
	return err
}

// 2'. a cache key (not a token) is deleted before the effect.
func getDelOK(ctx context.Context, rdb *redis.Client, pc PaymentClient, user string) error {
	rdb.Del(ctx, "cache:user:"+user)
	_, err := pc.Charge(ctx, &ChargeRequest{UserID: user})
	return err
}

// 3. Unlink, then the effect through a cross-package chain.
func unlink(ctx context.Context, rdb *redis.Client, key string) error {
	rdb.Unlink(ctx, "token:"+key) // want `deleted at \S+ \(\(redis\.cmdable\)\.Unlink\) before the effect it guards \(kb\.Charge -> kc\.Post -> \(\*http\.Client\)\.Do`
	return kb.Charge(ctx, key)
}

// 3'. a deferred Del runs after the effect.
func unlinkOK(ctx context.Context, rdb *redis.Client, key string) error {
	defer rdb.Unlink(ctx, "token:"+key)
	return kb.Charge(ctx, key)
}

// 4. SQL DELETE on the idempotency table, then the effect.
func sqlDelete(ctx context.Context, db *sql.DB, key string) error {
	res, err := db.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE key = $1", key) // want `deleted at \S+ \(\(\*sql\.DB\)\.ExecContext\) before the effect it guards`
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrDuplicate
	}
	return kb.Charge(ctx, key)
}

// 4'. a DELETE on another table.
func sqlDeleteOK(ctx context.Context, db *sql.DB, key string) error {
	if _, err := db.ExecContext(ctx, "DELETE FROM sessions WHERE key = $1", key); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 5. a cross-package delete helper, then the effect.
func helperDelete(ctx context.Context, rdb *redis.Client, key string) error {
	kb.ForgetToken(ctx, rdb, key) // want `deleted at \S+ \(kb\.ForgetToken -> \(redis\.cmdable\)\.Del\) before the effect`
	return kb.Charge(ctx, key)
}

// 5'. the helper deletes only on a path that returns before the effect.
func helperDeleteOK(ctx context.Context, rdb *redis.Client, key string, stale bool) error {
	if stale {
		kb.ForgetToken(ctx, rdb, key)
		return ErrDuplicate
	}
	return kb.Charge(ctx, key)
}

// 6. pgx DELETE .. RETURNING, then the effect.
func pgxDelete(ctx context.Context, pool *pgxpool.Pool, key string) error {
	var id string
	if err := pool.QueryRow(ctx, "DELETE FROM idempotency_tokens WHERE token = $1 RETURNING id", key).Scan(&id); err != nil { // want `deleted at \S+ \(\(\*pgxpool\.Pool\)\.QueryRow\) before the effect`
		return ErrDuplicate
	}
	return kb.Charge(ctx, id)
}

// 6'. claimed with UPDATE .. WHERE state, no delete.
func pgxDeleteOK(ctx context.Context, pool *pgxpool.Pool, key string) error {
	tag, err := pool.Exec(ctx, "UPDATE idempotency_tokens SET state='PROCESSING' WHERE token = $1 AND state = 'NEW'", key)
	if err != nil || tag.RowsAffected() == 0 {
		return ErrDuplicate
	}
	return kb.Charge(ctx, key)
}

// 7. in a loop: delete, then the effect.
func loop(ctx context.Context, rdb *redis.Client, keys []string) {
	for _, key := range keys {
		rdb.Del(ctx, "idem:"+key) // want `the idempotency token is deleted`
		kb.Charge(ctx, key)
	}
}

// 7'. in a loop: the effect, then the delete (the next iteration is another key).
func loopOK(ctx context.Context, rdb *redis.Client, keys []string) {
	for _, key := range keys {
		kb.Charge(ctx, key)
		rdb.Del(ctx, "idem:"+key)
	}
}

// 8. the key is a field named IdempotencyKey.
func fieldKey(ctx context.Context, rdb *redis.Client, pc PaymentClient, req *ChargeRequest) error {
	rdb.Del(ctx, req.IdempotencyKey) // want `the idempotency token is deleted`
	_, err := pc.Charge(ctx, req)
	return err
}

// 8'. a field that is not a token.
func fieldKeyOK(ctx context.Context, rdb *redis.Client, pc PaymentClient, req *ChargeRequest) error {
	rdb.Del(ctx, req.UserID)
	_, err := pc.Charge(ctx, req)
	return err
}

// 9. a DELETE inside a transaction on an idem_ table.
func txDelete(ctx context.Context, db *sql.DB, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx.Exec("DELETE FROM idem_records WHERE key = $1", key) // want `the idempotency token is deleted`
	if err := tx.Commit(); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 9'. the record is written, not deleted.
func txDeleteOK(ctx context.Context, db *sql.DB, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx.Exec("INSERT INTO idem_records(key, state) VALUES ($1, 'PROCESSING') ON CONFLICT DO NOTHING", key)
	if err := tx.Commit(); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 10. check-then-act: Get, the effect, Set.
func getThenSet(ctx context.Context, rdb *redis.Client, key string) error {
	if v, _ := rdb.Get(ctx, "idem:"+key).Result(); v != "" {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key) // want `the effect at \S+ \(kb\.Charge -> kc\.Post -> \(\*http\.Client\)\.Do, [^)]*\) runs after a non-atomic check of the idempotency token \(\(redis\.cmdable\)\.Get at k\.go:\d+:\d+\) and before the token is consumed \(\(redis\.cmdable\)\.Set at`
	rdb.Set(ctx, "idem:"+key, "DONE", 0)
	return err
}

// 10'. SET NX claims before the effect.
func getThenSetOK(ctx context.Context, rdb *redis.Client, key string) error {
	if v, _ := rdb.Get(ctx, "idem:"+key).Result(); v != "" {
		return ErrDuplicate
	}
	if ok, _ := rdb.SetNX(ctx, "idem:"+key, "PROCESSING", 0).Result(); !ok {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key)
	rdb.Set(ctx, "idem:"+key, "DONE", 0)
	return err
}

// 11. Exists, the effect, then Del.
func existsThenDel(ctx context.Context, rdb *redis.Client, key string) error {
	if n, _ := rdb.Exists(ctx, "token:"+key).Result(); n == 0 {
		return ErrDuplicate
	}
	_, err := http.Post("https://pay.example/charge", "text/plain", nil) // want `the effect at \S+ \(http\.Post, [^)]*\) runs after a non-atomic check`
	rdb.Del(ctx, "token:"+key)
	return err
}

// 11'. a Lua script claims atomically.
func existsThenDelOK(ctx context.Context, rdb *redis.Client, key string) error {
	if n, _ := rdb.Exists(ctx, "token:"+key).Result(); n == 0 {
		return ErrDuplicate
	}
	if v, _ := rdb.Eval(ctx, "return redis.call('SET', KEYS[1], 'P', 'NX')", []string{"token:" + key}).Result(); v == nil {
		return ErrDuplicate
	}
	_, err := http.Post("https://pay.example/charge", "text/plain", nil)
	rdb.Del(ctx, "token:"+key)
	return err
}

// 12. SELECT, the effect, INSERT.
func selectThenInsert(ctx context.Context, db *sql.DB, key string) error {
	var n int
	db.QueryRowContext(ctx, "SELECT count(*) FROM idempotency_keys WHERE key = $1", key).Scan(&n)
	if n > 0 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, key); err != nil { // want `runs after a non-atomic check of the idempotency token \(\(\*sql\.DB\)\.QueryRowContext`
		return err
	}
	_, err := db.ExecContext(ctx, "INSERT INTO idempotency_keys(key) VALUES ($1)", key)
	return err
}

// 12'. SELECT .. FOR UPDATE locks the row.
func selectThenInsertOK(ctx context.Context, db *sql.DB, key string) error {
	var st string
	db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1 FOR UPDATE", key).Scan(&st)
	if st != "" {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, key); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "UPDATE idempotency_keys SET state='DONE' WHERE key = $1", key)
	return err
}

// 13. HGet, the effect, HSet.
func hashCheck(ctx context.Context, rdb *redis.Client, pc PaymentClient, key string) error {
	if v, _ := rdb.HGet(ctx, "idem:"+key, "state").Result(); v == "DONE" {
		return nil
	}
	_, err := pc.Charge(ctx, &ChargeRequest{IdempotencyKey: key}) // want `the effect at \S+ \(\(k\.PaymentClient\)\.Charge, [^)]*\) runs after a non-atomic check`
	rdb.HSet(ctx, "idem:"+key, "state", "DONE")
	return err
}

// 13'. INSERT .. ON CONFLICT claims first.
func hashCheckOK(ctx context.Context, db *sql.DB, rdb *redis.Client, pc PaymentClient, key string) error {
	if v, _ := rdb.HGet(ctx, "idem:"+key, "state").Result(); v == "DONE" {
		return nil
	}
	res, _ := db.ExecContext(ctx, "INSERT INTO idempotency_keys(key, state) VALUES ($1, 'PROCESSING') ON CONFLICT DO NOTHING", key)
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrDuplicate
	}
	_, err := pc.Charge(ctx, &ChargeRequest{IdempotencyKey: key})
	rdb.HSet(ctx, "idem:"+key, "state", "DONE")
	return err
}

// 14. consumed through a cross-package helper.
func helperConsume(ctx context.Context, rdb *redis.Client, key string) error {
	if v, _ := rdb.Get(ctx, "idem:"+key).Result(); v == "" {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key) // want `before the token is consumed \(kb\.ForgetToken -> \(redis\.cmdable\)\.Del`
	kb.ForgetToken(ctx, rdb, key)
	return err
}

// 14'. claimed through a cross-package helper.
func helperConsumeOK(ctx context.Context, rdb *redis.Client, key string) error {
	if v, _ := rdb.Get(ctx, "idem:"+key).Result(); v != "" {
		return ErrDuplicate
	}
	if ok, _ := kb.Claim(ctx, rdb, key); !ok {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key)
	rdb.Set(ctx, "idem:"+key, "DONE", 0)
	return err
}

// 15. a SELECT through QueryRow, the effect, a DELETE.
func selectThenDelete(ctx context.Context, db *sql.DB, key string) error {
	var ok bool
	db.QueryRow("SELECT true FROM idempotency_tokens WHERE token = $1", key).Scan(&ok)
	if !ok {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key) // want `runs after a non-atomic check`
	db.Exec("DELETE FROM idempotency_tokens WHERE token = $1", key)
	return err
}

// 15'. SetArgs with NX claims.
func setArgsOK(ctx context.Context, rdb *redis.Client, key string) error {
	if v, _ := rdb.Get(ctx, "idem:"+key).Result(); v != "" {
		return ErrDuplicate
	}
	if err := rdb.SetArgs(ctx, "idem:"+key, "PROCESSING", redis.SetArgs{Mode: "NX"}).Err(); err != nil {
		return ErrDuplicate
	}
	err := kb.Charge(ctx, key)
	rdb.Set(ctx, "idem:"+key, "DONE", 0)
	return err
}

// 16. check and effect and a consume on the same path.
func checkActConsume(ctx context.Context, rdb *redis.Client, key string) error {
	if n, _ := rdb.Exists(ctx, "nonce:"+key).Result(); n > 0 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, key); err != nil { // want `runs after a non-atomic check`
		return err
	}
	return rdb.Set(ctx, "nonce:"+key, "1", 0).Err()
}

// 16'. a check and an effect, the token never consumed (a plain read).
func checkOnlyOK(ctx context.Context, rdb *redis.Client, key string) error {
	if n, _ := rdb.Exists(ctx, "nonce:"+key).Result(); n > 0 {
		return ErrDuplicate
	}
	return kb.Charge(ctx, key)
}

// 17. suppression with a reason.
func suppressed(ctx context.Context, rdb *redis.Client, key string) error {
	rdb.Del(ctx, "idem:"+key) //idemlint:ignore tokenorder the gateway dedups on the key itself; the token is only a hint
	return kb.Charge(ctx, key)
}

// 18'. an OAuth access token cache: read, fetch, store. Not an idempotency token.
func accessTokenCacheOK(ctx context.Context, rdb *redis.Client, user string) (string, error) {
	if tok, _ := rdb.Get(ctx, "access_token:"+user).Result(); tok != "" {
		return tok, nil
	}
	resp, err := http.Post("https://auth.example/oauth/token", "application/x-www-form-urlencoded", nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	rdb.Set(ctx, "access_token:"+user, "t", 0)
	return "t", nil
}

// 19'. logging out deletes a session token, then revokes it upstream.
func logoutOK(ctx context.Context, rdb *redis.Client, sessionToken string) error {
	rdb.Del(ctx, "session:"+sessionToken)
	_, err := http.Post("https://auth.example/revoke", "text/plain", nil)
	return err
}

// 18. an anti-resubmit form token (the seeds' "token mechanism") deleted first.
func formToken(ctx context.Context, rdb *redis.Client, formToken string) error {
	if n, _ := rdb.Del(ctx, "token:"+formToken).Result(); n == 0 { // want `the idempotency token is deleted`
		return ErrDuplicate
	}
	return kb.Charge(ctx, formToken)
}

// 19. a directive without a reason suppresses nothing.
func noReason(ctx context.Context, rdb *redis.Client, key string) error {
	rdb.Del(ctx, "idem:"+key) //idemlint:ignore tokenorder // want `idemlint:ignore tokenorder needs a reason` `the idempotency token is deleted`
	return kb.Charge(ctx, key)
}
