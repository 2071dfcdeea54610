package t

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"tb"
	"tc"

	"github.com/idemkit/idem/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type State string

const (
	StateFailed  State = "FAILED"
	StateUnknown State = "UNKNOWN"
	StateDone    State = "SUCCEEDED"
)

type ChargeRequest struct{ ID string }
type ChargeReply struct{ OK bool }

type PaymentClient interface {
	Charge(ctx context.Context, in *ChargeRequest, opts ...grpc.CallOption) (*ChargeReply, error)
}

type Store interface {
	UpdateStatus(ctx context.Context, id string, status string) error
}

func setState(ctx context.Context, db *sql.DB, id string, st State) error {
	_, err := db.ExecContext(ctx, "UPDATE payments SET state=$1 WHERE id=$2", st, id)
	return err
}

func refund(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO refunds(id) VALUES ($1)", id)
	return err
}

// 1. http error -> UPDATE .. 'FAILED'.
func sqlFailed(ctx context.Context, db *sql.DB, id string) error {
	_, err := http.Post("https://pay.example/charge", "text/plain", nil)
	if err != nil {
		db.ExecContext(ctx, "UPDATE payments SET state='FAILED' WHERE id=$1", id) // want `the error of http\.Post \(called at \S+\), a call that may do network I/O \(an HTTP request\), reaches an action at \S+ that writes a FAILED status without telling a timeout apart.*record UNKNOWN`
		return err
	}
	return nil
}

// 1'. a timeout is told apart first.
func sqlFailedOK(ctx context.Context, db *sql.DB, id string) error {
	_, err := http.Post("https://pay.example/charge", "text/plain", nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			db.ExecContext(ctx, "UPDATE payments SET state='UNKNOWN' WHERE id=$1", id)
			return err
		}
		db.ExecContext(ctx, "UPDATE payments SET state='FAILED' WHERE id=$1", id)
		return err
	}
	return nil
}

// 2. gRPC error -> a status passed to a helper that writes it.
func grpcSetState(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		return setState(ctx, db, id, StateFailed) // want `\(t\.PaymentClient\)\.Charge.*writes a FAILED status`
	}
	return setState(ctx, db, id, StateDone)
}

// 2'. codes.DeadlineExceeded is told apart.
func grpcSetStateOK(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			return setState(ctx, db, id, StateUnknown)
		}
		return setState(ctx, db, id, StateFailed)
	}
	return setState(ctx, db, id, StateDone)
}

// 3. cross-package chain and a cross-package failure helper.
func crossPackage(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		tb.MarkFailed(ctx, db, id) // want `the error of tc\.Charge \(called at \S+; tc\.Charge -> tc\.post -> \(\*http\.Client\)\.Do.*marks the operation failed`
		return err
	}
	return nil
}

// 3'. a cross-package helper tells the timeout apart.
func crossPackageOK(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		if tb.IsTimeout(err) {
			return err
		}
		tb.MarkFailed(ctx, db, id)
		return err
	}
	return nil
}

// 4. refund on error.
func refundOnError(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return refund(ctx, db, id) // want `reaches an action at \S+ that refunds`
	}
	return nil
}

// 4'. net.Error's Timeout is checked.
func refundOnErrorOK(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return err
		}
		return refund(ctx, db, id)
	}
	return nil
}

// 5. the idempotency token is deleted on error.
func deleteToken(ctx context.Context, rdb *redis.Client, key string) error {
	if err := tc.Charge(ctx, key); err != nil {
		rdb.Del(ctx, "idem:"+key) // want `reaches an action at \S+ that deletes the idempotency token`
		return err
	}
	return nil
}

// 5'. os.IsTimeout is checked.
func deleteTokenOK(ctx context.Context, rdb *redis.Client, key string) error {
	if err := tc.Charge(ctx, key); err != nil {
		if os.IsTimeout(err) {
			return err
		}
		rdb.Del(ctx, "idem:"+key)
		return err
	}
	return nil
}

// 6. the transaction holding the intent is rolled back on error (the seed's
// "common wrong practice").
func rollbackIntent(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx.Exec("UPDATE payments SET state='PROCESSING' WHERE id=$1", id)
	if err := tc.Charge(ctx, id); err != nil {
		tx.Rollback() // want `reaches an action at \S+ that rolls back the transaction holding the intent`
		return err
	}
	return tx.Commit()
}

// 6'. a timeout commits UNKNOWN instead.
func rollbackIntentOK(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx.Exec("UPDATE payments SET state='PROCESSING' WHERE id=$1", id)
	if err := tc.Charge(ctx, id); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			tx.Exec("UPDATE payments SET state='UNKNOWN' WHERE id=$1", id)
			return tx.Commit()
		}
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// 6 (another twin). a read-only transaction rolled back on the error loses nothing.
func rollbackReadOnlyOK(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var n int
	tx.QueryRow("SELECT count(*) FROM payments WHERE id=$1", id).Scan(&n)
	if err := tc.Charge(ctx, id); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// 7. returning the error runs the deferred Rollback.
func deferredRollback(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx.Exec("UPDATE payments SET state='PROCESSING' WHERE id=$1", id)
	if err := tc.Charge(ctx, id); err != nil {
		return err // want `reaches an action at \S+ that returns, so the deferred Rollback undoes the transaction holding the intent`
	}
	return tx.Commit()
}

// 7'. the intent was committed before the call.
func deferredRollbackOK(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx.Exec("UPDATE payments SET state='PROCESSING' WHERE id=$1", id)
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := tc.Charge(ctx, id); err != nil {
		return err
	}
	return nil
}

// 8. a permanent failure of the idem runtime.
func permanent(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return runtime.Permanent(err) // want `reaches an action at \S+ that returns a permanent failure`
	}
	return nil
}

// 8'. timeouts are reported as unknown.
func permanentOK(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return runtime.Unknown(err)
		}
		return runtime.Permanent(err)
	}
	return nil
}

// 9. a wrapped error.
func wrapped(ctx context.Context, db *sql.DB, id string) error {
	err := tc.Charge(ctx, id)
	err = fmt.Errorf("charge %s: %w", id, err)
	if err != nil {
		tb.MarkFailed(ctx, db, id) // want `marks the operation failed`
	}
	return err
}

// 9'. the failure follows a validation error, not the network error.
func wrappedOK(ctx context.Context, db *sql.DB, id string) error {
	if err := validate(id); err != nil {
		tb.MarkFailed(ctx, db, id)
		return err
	}
	return tc.Charge(ctx, id)
}

func validate(id string) error {
	if id == "" {
		return errors.New("empty id")
	}
	return nil
}

// 10. a retry loop that gives up with FAILED.
func retried(ctx context.Context, db *sql.DB, id string) error {
	var err error
	for i := 0; i < 3; i++ {
		if err = tc.Charge(ctx, id); err == nil {
			break
		}
	}
	if err != nil {
		return setState(ctx, db, id, StateFailed) // want `writes a FAILED status`
	}
	return nil
}

// 10'. the loop stops on a timeout and records UNKNOWN.
func retriedOK(ctx context.Context, db *sql.DB, id string) error {
	var err error
	for i := 0; i < 3; i++ {
		if err = tc.Charge(ctx, id); err == nil || errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return setState(ctx, db, id, StateUnknown)
		}
		return setState(ctx, db, id, StateFailed)
	}
	return nil
}

// 11. FAILED written on the error path.
func declined(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	reply, err := pc.Charge(ctx, &ChargeRequest{ID: id})
	if err != nil {
		tb.MarkFailed(ctx, db, id) // want `marks the operation failed`
		return err
	}
	_ = reply
	return nil
}

// 11'. FAILED written for a definite decline, not for the error.
func declinedOK(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	reply, err := pc.Charge(ctx, &ChargeRequest{ID: id})
	if err != nil {
		return err
	}
	if !reply.OK {
		return tb.MarkFailed(ctx, db, id)
	}
	return nil
}

// 12. a status-setting method of an interface given "FAILED".
func storeStatus(ctx context.Context, st Store, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return st.UpdateStatus(ctx, id, "FAILED") // want `reaches an action at \S+ that writes a FAILED status`
	}
	return st.UpdateStatus(ctx, id, "SUCCEEDED")
}

// 12'. the error path records UNKNOWN.
func storeStatusOK(ctx context.Context, st Store, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return st.UpdateStatus(ctx, id, "UNKNOWN")
	}
	return st.UpdateStatus(ctx, id, "SUCCEEDED")
}

// 13. a redis hash status.
func redisStatus(ctx context.Context, rdb *redis.Client, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		rdb.HSet(ctx, "payment:"+id, "state", "failed") // want `writes a FAILED status`
		return err
	}
	return nil
}

// 13'. the redis hash records unknown.
func redisStatusOK(ctx context.Context, rdb *redis.Client, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		rdb.HSet(ctx, "payment:"+id, "state", "unknown")
		return err
	}
	return nil
}

// 14. gRPC Invoke error -> DELETE of the idempotency record.
func deleteRecord(ctx context.Context, db *sql.DB, cc grpc.ClientConnInterface, key string) error {
	if err := cc.Invoke(ctx, "/pay.Pay/Charge", nil, nil); err != nil {
		db.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE key=$1", key) // want `deletes the idempotency token`
		return err
	}
	return nil
}

// 14'. codes.Unavailable/DeadlineExceeded through status.FromError.
func deleteRecordOK(ctx context.Context, db *sql.DB, cc grpc.ClientConnInterface, key string) error {
	if err := cc.Invoke(ctx, "/pay.Pay/Charge", nil, nil); err != nil {
		st, _ := status.FromError(err)
		if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Unavailable {
			return err
		}
		db.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE key=$1", key)
		return err
	}
	return nil
}

// 15. pgx Exec with a "failed" argument.
func pgxFailed(ctx context.Context, pool *pgxpool.Pool, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		pool.Exec(ctx, "UPDATE payments SET status=$1 WHERE id=$2", "failed", id) // want `writes a FAILED status`
		return err
	}
	return nil
}

// 15'. err == context.DeadlineExceeded is compared.
func pgxFailedOK(ctx context.Context, pool *pgxpool.Pool, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		if err == context.DeadlineExceeded {
			return err
		}
		pool.Exec(ctx, "UPDATE payments SET status=$1 WHERE id=$2", "failed", id)
		return err
	}
	return nil
}

// 16. a cross-package status writer given StatusFailed.
func crossStatus(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return tb.SetStatus(ctx, db, id, tb.StatusFailed) // want `writes a FAILED status`
	}
	return nil
}

// 16'. the same writer given StatusUnknown.
func crossStatusOK(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return tb.SetStatus(ctx, db, id, tb.StatusUnknown)
	}
	return nil
}

// 17. a local error handler that fails without telling timeouts apart.
func handleErr(ctx context.Context, db *sql.DB, id string, err error) error {
	setState(ctx, db, id, StateFailed)
	return err
}

func handleErrOK(ctx context.Context, db *sql.DB, id string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return setState(ctx, db, id, StateUnknown)
	}
	return setState(ctx, db, id, StateFailed)
}

func viaHandler(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return handleErr(ctx, db, id, err) // want `writes a FAILED status \(t\.handleErr -> t\.setState\)`
	}
	return nil
}

// 17'. the handler tells the timeout apart.
func viaHandlerOK(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return handleErrOK(ctx, db, id, err)
	}
	return nil
}

// 18'. a failed read (HTTP GET) has no remote effect: marking failed is fine.
func readFailedOK(ctx context.Context, db *sql.DB, id string) error {
	if _, err := http.Get("https://rates.example/eur"); err != nil {
		tb.MarkFailed(ctx, db, id)
		return err
	}
	return nil
}

// 18. suppression.
func suppressed(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		//idemlint:ignore timeoutfail the gateway guarantees no charge on any error (documented contract)
		tb.MarkFailed(ctx, db, id)
		return err
	}
	return nil
}

// 19. a directive without a reason suppresses nothing.
func noReason(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		//idemlint:ignore timeoutfail // want `idemlint:ignore timeoutfail needs a reason`
		tb.MarkFailed(ctx, db, id) // want `marks the operation failed`
		return err
	}
	return nil
}

// 19'. a directive for another rule does not suppress this one.
func otherRule(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		tb.MarkFailed(ctx, db, id) //idemlint:ignore txrpc not this rule // want `marks the operation failed`
		return err
	}
	return nil
}

// 20. the record is released on any error.
func released(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return runtime.Retryable(err) // want `reaches an action at \S+ that releases the record, so a retry runs the effect again`
	}
	return nil
}

// 20'. released only when the request provably never left (a validation
// error before the call); the call's error is reported as unknown.
func releasedOK(ctx context.Context, id string) error {
	if err := validate(id); err != nil {
		return runtime.Retryable(err)
	}
	if err := tc.Charge(ctx, id); err != nil {
		return runtime.Unknown(err)
	}
	return nil
}

// 21. ErrPermanent wrapped around the call's error.
func wrapsPermanent(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return fmt.Errorf("%w: charge: %v", runtime.ErrPermanent, err) // want `returns a permanent failure \(wraps the idem runtime's ErrPermanent\)`
	}
	return nil
}

// 21'. ErrPermanent for a timeout-aware path.
func wrapsPermanentOK(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		if os.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			return runtime.Unknown(err)
		}
		return fmt.Errorf("%w: charge: %v", runtime.ErrPermanent, err)
	}
	return nil
}

// 22. ErrPermanent returned as is.
func returnsPermanent(ctx context.Context, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		return runtime.ErrPermanent // want `returns a permanent failure \(the idem runtime's ErrPermanent\)`
	}
	return nil
}

// 22'. ErrPermanent returned for a definite decline only.
func returnsPermanentOK(ctx context.Context, pc PaymentClient, id string) error {
	reply, err := pc.Charge(ctx, &ChargeRequest{ID: id})
	if err != nil {
		return runtime.Unknown(err)
	}
	if !reply.OK {
		return runtime.ErrPermanent
	}
	return nil
}
