package fb

import (
	"context"
	"database/sql"
	"errors"

	"fc"

	"github.com/redis/go-redis/v9"
)

func Send() error { return fc.Post(nil) } // want Send:`netio\(fc\.Post -> \(\*http\.Client\)\.Do\)`

func Double(x int) int { return fc.Pure(x) }

func Atomically(db *sql.DB, fn func() error) error { // want Atomically:`txrunner\(1\)` Atomically:`callsparams\(\[1\]\)`
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(); err != nil {
		return err
	}
	return tx.Commit()
}

func IsTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) } // want IsTimeout:`timeoutcheck`

func MarkFailed(db *sql.DB, id string) error { // want MarkFailed:`failaction\(writes a FAILED status`
	_, err := db.Exec("UPDATE payments SET state='FAILED' WHERE id=$1", id)
	return err
}

func SetState(db *sql.DB, id, state string) error { // want SetState:`writes param 2 into payments.state`
	_, err := db.Exec("UPDATE payments SET state=$1 WHERE id=$2", state, id)
	return err
}

func Forget(ctx context.Context, rdb *redis.Client, key string) { // want Forget:`tokendelete\(\(redis\.cmdable\)\.Del\)` Forget:`netio` Forget:`failaction\(deletes the idempotency token`
	rdb.Del(ctx, "idem:"+key)
}

func Claim(ctx context.Context, rdb *redis.Client, key string) bool { // want Claim:`tokenclaim` Claim:`netio`
	return rdb.SetNX(ctx, "idem:"+key, "PROCESSING", 0).Val()
}

func Finish(tx *sql.Tx) error { return tx.Commit() } // want Finish:`closestx\(\[0\]\)`

func Retry(fn func() error) error { return fn() } // want Retry:`callsparams\(\[0\]\)`

func Die(msg string) { panic("fb: " + msg) } // want Die:`noreturn`

func RollbackIf(tx *sql.Tx, err error) { // want RollbackIf:`closestx\(\[\], 0 when 1 is set\)`
	if err != nil {
		_ = tx.Rollback()
	}
}

func CommitIfNil(tx *sql.Tx, err error) { // want CommitIfNil:`closestx\(\[\], 0 when 1 is nil\)`
	if err == nil {
		_ = tx.Commit()
	}
}

func RollbackThenDie(tx *sql.Tx, err error) {
	if err != nil {
		_ = tx.Rollback()
		Die(err.Error())
	}
}
