package a

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/smtp"

	"b"

	pgx "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

type ChargeRequest struct{ ID string }
type ChargeReply struct{ OK bool }

// PaymentClient is a generated gRPC client stub.
type PaymentClient interface {
	Charge(ctx context.Context, in *ChargeRequest, opts ...grpc.CallOption) (*ChargeReply, error)
}

// 1. plain call before Commit.
func plain(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.Exec("UPDATE intents SET state='PROCESSING'"); err != nil {
		tx.Rollback()
		return err
	}
	if _, err := http.Get("https://pay.example/charge"); err != nil { // want `http\.Get \(called at \S+\) may do network I/O while the database transaction begun at a\.go:\d+:\d+ is open.*persist PROCESSING in its own transaction, commit, then call`
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// 1'. the call after Commit.
func plainOK(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.Exec("UPDATE intents SET state='PROCESSING'"); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = http.Get("https://pay.example/charge")
	return err
}

// 2. defer Rollback, call, then Commit.
func deferRollback(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx.Exec("INSERT INTO outbox VALUES (1)")
	if _, err := http.Post("https://hook.example", "text/plain", nil); err != nil { // want `http\.Post \(called at \S+\) may do network I/O`
		return err
	}
	return tx.Commit()
}

// 2'. defer Rollback, Commit, then call.
func deferRollbackOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx.Exec("INSERT INTO outbox VALUES (1)")
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = http.Post("https://hook.example", "text/plain", nil)
	return err
}

// 3. Begin's error path is not in the transaction; after the check it is.
func beginErrPath(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		http.Post("https://alert.example", "text/plain", nil) // not in a tx
		return err
	}
	http.Get("https://pay.example") // want `http\.Get \(called at \S+\) may do network I/O`
	return tx.Commit()
}

// 3'. only the error path calls.
func beginErrPathOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err == nil {
		return tx.Commit()
	}
	http.Post("https://alert.example", "text/plain", nil)
	return err
}

// 4. commit-or-rollback in a deferred closure: open until return.
func deferredClosure(db *sql.DB) (err error) {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			return
		}
		err = tx.Commit()
	}()
	_, err = http.Get("https://pay.example") // want `http\.Get \(called at \S+\) may do network I/O`
	return err
}

// 4'. the deferred closure only rolls back; Commit comes before the call.
func deferredClosureOK(db *sql.DB) (err error) {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if err = tx.Commit(); err != nil {
		return err
	}
	_, err = http.Get("https://pay.example")
	return err
}

// 5. a closure invoked inside the transaction.
func closureInTx(db *sql.DB) error {
	notify := func() { http.Get("https://hook.example") }
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	notify() // want `a\.closureInTx\.func1 \(called at \S+\) may do network I/O \(a\.closureInTx\.func1 -> http\.Get, leaf call`
	return tx.Commit()
}

// 5'. the closure is defined inside but invoked after Commit.
func closureInTxOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	notify := func() { http.Get("https://hook.example") }
	if err := tx.Commit(); err != nil {
		return err
	}
	notify()
	return nil
}

// 6. a goroutine started inside the transaction.
func goroutineInTx(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	go func() { http.Get("https://hook.example") }() // want `a goroutine started at \S+ runs a\.goroutineInTx\.func1, which may do network I/O`
	return tx.Commit()
}

// 6'. the goroutine starts after Commit.
func goroutineInTxOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	go func() { http.Get("https://hook.example") }()
	return nil
}

// 7. a method value called inside the transaction.
func methodValue(db *sql.DB, client *http.Client, req *http.Request) error {
	do := client.Do
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := do(req); err != nil { // want `\(\*http\.Client\)\.Do \(called at \S+\) may do network I/O`
		return err
	}
	return tx.Commit()
}

// 7'. the method value is called after Commit.
func methodValueOK(db *sql.DB, client *http.Client, req *http.Request) error {
	do := client.Do
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = do(req)
	return err
}

// 8. the transaction is passed to a helper that does I/O.
func chargeWith(tx *sql.Tx, id string) error {
	if _, err := tx.Exec("UPDATE intents SET state='PROCESSING' WHERE id=$1", id); err != nil {
		return err
	}
	return b.SendCharge(id)
}

func recordWith(tx *sql.Tx, id string) error {
	_, err := tx.Exec("UPDATE intents SET state='PROCESSING' WHERE id=$1", id)
	return err
}

func txToHelper(db *sql.DB, id string) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := chargeWith(tx, id); err != nil { // want `a\.chargeWith -> b\.SendCharge -> c\.PostJSON -> \(\*http\.Client\)\.Do`
		return err
	}
	return tx.Commit()
}

// 8'. the helper only uses the transaction.
func txToHelperOK(db *sql.DB, id string) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := recordWith(tx, id); err != nil {
		return err
	}
	return tx.Commit()
}

// 9. a savepoint committed: the outer transaction is still open.
func savepoint(ctx context.Context, conn *pgx.Conn, pc PaymentClient) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	sp.Exec(ctx, "UPDATE intents SET state='PROCESSING'")
	if err := sp.Commit(ctx); err != nil {
		return err
	}
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: "1"}); err != nil { // want `\(a\.PaymentClient\)\.Charge \(called at \S+\) may do network I/O`
		return err
	}
	return tx.Commit(ctx)
}

// 9'. the outer transaction is committed before the call.
func savepointOK(ctx context.Context, conn *pgx.Conn, pc PaymentClient) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	sp.Exec(ctx, "UPDATE intents SET state='PROCESSING'")
	if err := sp.Commit(ctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	_, err = pc.Charge(ctx, &ChargeRequest{ID: "1"})
	return err
}

// 10. pgx.BeginFunc closure.
func beginFunc(ctx context.Context, conn *pgx.Conn, pc PaymentClient) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tx.Exec(ctx, "UPDATE intents SET state='PROCESSING'")
		_, err := pc.Charge(ctx, &ChargeRequest{}) // want `\(a\.PaymentClient\)\.Charge \(called at \S+\) may do network I/O while the database transaction run by the call at a\.go:\d+:\d+ is open`
		return err
	})
}

// 10'. the BeginFunc closure only touches the database.
func beginFuncOK(ctx context.Context, conn *pgx.Conn, pc PaymentClient) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE intents SET state='PROCESSING'")
		return err
	})
	if err != nil {
		return err
	}
	_, err = pc.Charge(ctx, &ChargeRequest{})
	return err
}

// 11. pgx.BeginTxFunc closure with a go-redis command.
func beginTxFunc(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tx.Exec(ctx, "INSERT INTO ledger VALUES (1)")
		return rdb.Set(ctx, "balance:1", 10, 0).Err() // want `\(redis\.cmdable\)\.Set \(called at \S+\) may do network I/O`
	})
}

// 11'. the redis command runs after BeginTxFunc returned.
func beginTxFuncOK(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client) error {
	if err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES (1)")
		return err
	}); err != nil {
		return err
	}
	return rdb.Set(ctx, "balance:1", 10, 0).Err()
}

// 12. an inferred user transaction runner (in another package).
func inferredRunner(db *sql.DB) error {
	return b.WithTx(db, func() error {
		return b.SendCharge("1") // want `b\.SendCharge \(called at \S+\) may do network I/O`
	})
}

// 12'. a helper that calls its callback after Commit is not a runner.
func inferredRunnerOK(db *sql.DB) error {
	return b.AfterCommit(db, func() error {
		return b.SendCharge("1")
	})
}

// 13. cross-package chain a -> b -> c -> (*http.Client).Do.
func crossPackage(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.SendCharge("1"); err != nil { // want `b\.SendCharge \(called at \S+\) may do network I/O \(b\.SendCharge -> c\.PostJSON -> \(\*http\.Client\)\.Do, leaf call`
		return err
	}
	return tx.Commit()
}

// 13'. a helper from the same packages that does no I/O.
func crossPackageOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if !b.Validate("1") {
		return nil
	}
	return tx.Commit()
}

// 14. gRPC ClientConnInterface.Invoke.
func invoke(ctx context.Context, db *sql.DB, cc grpc.ClientConnInterface) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := cc.Invoke(ctx, "/pay.Pay/Charge", nil, nil); err != nil { // want `\(grpc\.ClientConnInterface\)\.Invoke \(called at \S+\) may do network I/O`
		return err
	}
	return tx.Commit()
}

// 14'. rolled back before the call.
func invokeOK(ctx context.Context, db *sql.DB, cc grpc.ClientConnInterface) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx.Rollback()
	return cc.Invoke(ctx, "/pay.Pay/Charge", nil, nil)
}

// 15. net.Dial.
func dial(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	conn, err := net.Dial("tcp", "ledger:9000") // want `net\.Dial \(called at \S+\) may do network I/O`
	if err != nil {
		tx.Rollback()
		return err
	}
	conn.Close()
	return tx.Commit()
}

// 15'. dial after Commit.
func dialOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	conn, err := net.Dial("tcp", "ledger:9000")
	if err != nil {
		return err
	}
	return conn.Close()
}

// 16. net/smtp.
func mail(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	smtp.SendMail("mail:25", nil, "a@example", []string{"b@example"}, nil) // want `smtp\.SendMail \(called at \S+\) may do network I/O`
	return tx.Commit()
}

// 16'. mail after Commit.
func mailOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := tx.Commit(); err != nil {
		return err
	}
	return smtp.SendMail("mail:25", nil, "a@example", []string{"b@example"}, nil)
}

// 17. a pgxpool transaction and a redis command.
func poolRedis(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	rdb.Del(ctx, "cache:user:1") // want `\(redis\.cmdable\)\.Del \(called at \S+\) may do network I/O`
	return tx.Commit(ctx)
}

// 17'. the redis command after Commit.
func poolRedisOK(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	return rdb.Del(ctx, "cache:user:1").Err()
}

// 18. a transaction per loop iteration, the call inside.
func loop(db *sql.DB, ids []string) error {
	for _, id := range ids {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		b.SendCharge(id) // want `b\.SendCharge \(called at \S+\) may do network I/O`
		tx.Commit()
	}
	return nil
}

// 18'. the call after each Commit.
func loopOK(db *sql.DB, ids []string) error {
	for _, id := range ids {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		tx.Commit()
		b.SendCharge(id)
	}
	return nil
}

// 19. a named function handed to a runner.
func chargeInTx(tx pgx.Tx) error { return b.SendCharge("1") }

func recordInTx(tx pgx.Tx) error {
	_, err := tx.Exec(context.Background(), "UPDATE intents SET state='PROCESSING'")
	return err
}

func namedCallback(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, chargeInTx) // want `a\.chargeInTx \(called at \S+\) may do network I/O .* while the database transaction run by the call`
}

// 19'. a named callback without I/O.
func namedCallbackOK(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, recordInTx)
}

// 20. committed through a helper known (by facts) to commit.
func helperCommit(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	b.SendCharge("1") // want `b\.SendCharge \(called at \S+\) may do network I/O`
	return b.Finish(tx)
}

// 20'. the call after the helper committed.
func helperCommitOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := b.Finish(tx); err != nil {
		return err
	}
	return b.SendCharge("1")
}

// 21. a user runner whose callback takes the transaction.
func withSQLTx(db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func userRunner(db *sql.DB) error {
	return withSQLTx(db, func(tx *sql.Tx) error {
		tx.Exec("UPDATE intents SET state='PROCESSING'")
		return b.SendCharge("1") // want `b\.SendCharge \(called at \S+\) may do network I/O`
	})
}

// 21'. the same runner with a database-only callback, the call after it.
func userRunnerOK(db *sql.DB) error {
	if err := withSQLTx(db, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE intents SET state='PROCESSING'")
		return err
	}); err != nil {
		return err
	}
	return b.SendCharge("1")
}

// 22. suppression with a reason; a directive without a reason suppresses nothing.
func suppressed(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	//idemlint:ignore txrpc the audit hook is fire-and-forget and idempotent on its side
	b.SendCharge("audit")
	b.SendCharge("1") //idemlint:ignore txrpc // want `idemlint:ignore txrpc needs a reason` `b\.SendCharge \(called at \S+\) may do network I/O`
	return tx.Commit()
}

// 23. a closure handed to a retry helper in another package (known, by
// facts, to call its func parameter) inside the transaction.
func retried(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.Retry(3, func() error { return b.SendCharge("1") }); err != nil { // want `b\.Retry \(called at \S+\) may do network I/O \(b\.Retry -> a\.retried\.func1 -> b\.SendCharge -> c\.PostJSON -> \(\*http\.Client\)\.Do, leaf call`
		return err
	}
	return tx.Commit()
}

// 23'. the retried closure only validates.
func retriedOK(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.Retry(3, func() error { b.Validate("1"); return nil }); err != nil {
		return err
	}
	return tx.Commit()
}

// 26. a transaction begun by a helper in another package, itself through a
// helper in a third (b.Repo.GetTx -> c.OpenTx -> Begin).
func beginHelper(r *b.Repo) error {
	tx, err := r.GetTx()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := http.Get("https://pay.example"); err != nil { // want `http\.Get \(called at \S+\) may do network I/O while the database transaction begun at a\.go:\d+:\d+ is open`
		return err
	}
	return tx.Commit()
}

// 27. the same with pgx (b.Repo.GetPgxTx -> c.StartTx -> Begin).
func beginHelperPgx(ctx context.Context, r *b.Repo) error {
	tx, err := r.GetPgxTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := b.SendCharge("1"); err != nil { // want `b\.SendCharge \(called at \S+\) may do network I/O \(b\.SendCharge -> c\.PostJSON .*\) while the database transaction begun at a\.go:\d+:\d+ is open`
		return err
	}
	return tx.Commit(ctx)
}

// 28. the same with gorm (b.Repo.Session -> Begin).
func beginHelperGorm(ctx context.Context, r *b.Repo) error {
	tx := r.Session(ctx)
	if err := b.SendCharge("1"); err != nil { // want `b\.SendCharge \(called at \S+\) may do network I/O \(b\.SendCharge -> c\.PostJSON .*\) while the database transaction begun at a\.go:\d+:\d+ is open`
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

// 26'. a transaction the repository already holds: not begun here.
func currentTx(r *b.Repo) error {
	tx, err := r.Current()
	if err != nil {
		return err
	}
	if _, err := http.Get("https://pay.example"); err != nil {
		return err
	}
	return tx.Commit()
}
