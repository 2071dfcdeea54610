// Package tflow holds timeoutfail's cases of a FAILED status written
// through SQL text held in variables, query structs and squirrel
// builders, and through
// repository methods given the status as a parameter or as a field of a
// struct (trepo), set directly or through a setter method. Each positive
// case is followed by its must-not-flag twin.
package tflow

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"

	sq "github.com/Masterminds/squirrel"

	"trepo"
)

// Provider pays out over HTTP.
type Provider struct {
	URL  string
	HTTP *http.Client
}

// Pay asks the provider to pay p.
func (pr *Provider) Pay(ctx context.Context, p *trepo.Payout) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", pr.URL, bytes.NewBufferString(p.Reference))
	if err != nil {
		return "", err
	}
	resp, err := pr.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	return resp.Header.Get("X-Reference"), nil
}

// 1. The payout service: after a provider's error the status is
// set to FAILED on the struct, written through the repository, and the
// next provider is tried: the same payout can be paid twice.
func payOut(ctx context.Context, repo *trepo.Repo, providers []*Provider, p *trepo.Payout) error {
	for _, pr := range providers {
		ref, err := pr.Pay(ctx, p)
		if err != nil {
			p.Status = trepo.StatusFailed
			p.FailureReason = err.Error()
			if uerr := repo.UpdatePayout(ctx, p); uerr != nil { // want `the error of \(\*tflow\.Provider\)\.Pay \(called at tflow\.go:47:15;.*reaches an action at \S+ that writes a FAILED status`
				return uerr
			}
			continue
		}
		p.Status, p.ProviderRef = trepo.StatusCompleted, ref
		return repo.UpdatePayout(ctx, p)
	}
	return errors.New("no provider paid")
}

// A timeout is told apart: UNKNOWN, and no other provider.
func payOutChecked(ctx context.Context, repo *trepo.Repo, providers []*Provider, p *trepo.Payout) error {
	for _, pr := range providers {
		ref, err := pr.Pay(ctx, p)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				p.Status = trepo.StatusUnknown
				return repo.UpdatePayout(ctx, p)
			}
			p.Status = trepo.StatusFailed
			if uerr := repo.UpdatePayout(ctx, p); uerr != nil {
				return uerr
			}
			continue
		}
		p.Status, p.ProviderRef = trepo.StatusCompleted, ref
		return repo.UpdatePayout(ctx, p)
	}
	return errors.New("no provider paid")
}

// The status is set on one path only: the value reaching the call is not
// determined, silent.
func payOutMaybeFailed(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout, giveUp bool) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		if giveUp {
			p.Status = trepo.StatusFailed
		}
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

// FAILED set, but the method called writes no status: silent.
func payOutAttempt(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Status = trepo.StatusFailed
		return repo.SaveAttempt(ctx, p)
	}
	return nil
}

// 2. A new struct given FAILED, by value.
func recordFailure(ctx context.Context, repo *trepo.Repo, pr *Provider, ref string) error {
	p := &trepo.Payout{Reference: ref}
	if _, err := pr.Pay(ctx, p); err != nil {
		return repo.Insert(ctx, trepo.Payout{Reference: ref, Status: trepo.StatusFailed}) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

// The same struct given PENDING: silent.
func recordPending(ctx context.Context, repo *trepo.Repo, pr *Provider, ref string) error {
	p := &trepo.Payout{Reference: ref}
	if _, err := pr.Pay(ctx, p); err != nil {
		return repo.Insert(ctx, trepo.Payout{Reference: ref, Status: trepo.StatusPending})
	}
	return nil
}

// 3. A named constant given to a parameter named for neither status nor
// state, and a model saved through gorm.
func giveUp(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		return repo.SetValue(ctx, p.Reference, trepo.StatusFailed) // want `writes a FAILED status`
	}
	return nil
}

func giveUpORM(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Status = trepo.StatusFailed
		return repo.Save(ctx, p) // want `writes a FAILED status`
	}
	return nil
}

// A status read in the WHERE only is not written: silent.
func countFailure(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		return repo.BumpRetries(ctx, p.Reference, trepo.StatusFailed)
	}
	return nil
}

// 4. The FAILED write's SQL text in a query struct and through
// fmt.Sprintf.
var payoutSQL = struct{ fail, unknown string }{
	fail:    "UPDATE payouts SET status = 'FAILED' WHERE reference = $1",
	unknown: "UPDATE payouts SET status = 'UNKNOWN' WHERE reference = $1",
}

func failByStruct(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		db.ExecContext(ctx, payoutSQL.fail, p.Reference) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

func unknownByStruct(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		db.ExecContext(ctx, payoutSQL.unknown, p.Reference)
		return err
	}
	return nil
}

const payoutsTable = "payouts"

func failBySprintf(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		q := fmt.Sprintf("UPDATE %s SET status = '%s' WHERE reference = $1", payoutsTable, trepo.StatusFailed)
		db.ExecContext(ctx, q, p.Reference) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

// 5. The status set through a setter method of the payout (trepo's Fail,
// Transition), then written through the repository.
func failBySetter(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Fail(err.Error())
		return repo.UpdatePayout(ctx, p) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

func failByTransition(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Transition(trepo.StatusFailed)
		return repo.UpdatePayout(ctx, p) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

// A value struct set through the setter, written by value.
func failBySetterValue(ctx context.Context, repo *trepo.Repo, pr *Provider, ref string) error {
	var p trepo.Payout
	p.Reference = ref
	if _, err := pr.Pay(ctx, &p); err != nil {
		p.Fail(err.Error())
		return repo.Insert(ctx, p) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

// UNKNOWN through the setter: silent.
func unknownByTransition(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Transition(trepo.StatusUnknown)
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

// FAILED, then a setter of another state: silent.
func failThenTransition(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Fail(err.Error())
		p.Transition(trepo.StatusUnknown)
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

// Setters that are not: FAILED on one path only, a status normalized
// after the store, a hook given the payout after the setter. Silent.
func failIfBySetter(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout, giveUp bool) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.FailIf(giveUp)
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

func failThenNormalize(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Status = trepo.StatusFailed
		p.Normalize()
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

func failThenHook(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout, hook func(*trepo.Payout)) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Resolve(trepo.StatusFailed, hook)
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

// The setter, but a method that writes no status: silent.
func failBySetterAttempt(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		p.Fail(err.Error())
		return repo.SaveAttempt(ctx, p)
	}
	return nil
}

// 6. The status of an embedded struct (trepo.Transfer embeds a Record),
// set directly or through the Record's setter, written through the
// repository's SQL or gorm.
func failEmbedded(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Status = trepo.StatusFailed
		return repo.UpdateTransfer(ctx, t) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

func failEmbeddedORM(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Status = trepo.StatusFailed
		return repo.SaveTransfer(ctx, t) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

func failEmbeddedSetter(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Reject()
		return repo.UpdateTransfer(ctx, t) // want `reaches an action at \S+ that writes a FAILED status`
	}
	return nil
}

// UNKNOWN in the embedded struct: silent.
func unknownEmbedded(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Status = trepo.StatusUnknown
		return repo.UpdateTransfer(ctx, t)
	}
	return nil
}

// FAILED, then the embedded struct replaced whole or handed to a call
// that may set it: silent.
func failEmbeddedReset(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer, fresh trepo.Record) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Status = trepo.StatusFailed
		t.Record = fresh
		return repo.UpdateTransfer(ctx, t)
	}
	return nil
}

func failEmbeddedHandedOn(ctx context.Context, repo *trepo.Repo, pr *Provider, t *trepo.Transfer, review func(*trepo.Record)) error {
	if _, err := pr.Pay(ctx, &trepo.Payout{Reference: t.Reference}); err != nil {
		t.Status = trepo.StatusFailed
		review(&t.Record)
		return repo.UpdateTransfer(ctx, t)
	}
	return nil
}

// 7. The FAILED write through a squirrel update builder: run through
// RunWith, turned into text with ToSql, or built in a variable.
func failBySquirrel(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		sq.Update("payouts").Set("status", trepo.StatusFailed).Where(sq.Eq{"reference": p.Reference}).RunWith(db).ExecContext(ctx) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

func failBySquirrelToSQL(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		q, args, qerr := sq.StatementBuilder.PlaceholderFormat(sq.Dollar).Update("payouts").
			Set("status", "FAILED").Where("reference = ?", p.Reference).ToSql()
		if qerr != nil {
			return qerr
		}
		db.ExecContext(ctx, q, args...) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

func failBySquirrelVar(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		b := sq.Update("payouts").Set("status", "FAILED")
		b = b.Where(sq.Eq{"reference": p.Reference})
		b.RunWith(db).ExecContext(ctx) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

// SetMap of a map made in place with constant keys, in a variable.
func failBySquirrelSetMap(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		b := sq.Update("payouts").SetMap(map[string]interface{}{"status": trepo.StatusFailed, "updated_at": "now"})
		b = b.Where(sq.Eq{"reference": p.Reference})
		b.RunWith(db).ExecContext(ctx) // want `reaches an action at \S+ that writes a FAILED status`
		return err
	}
	return nil
}

// UNKNOWN through SetMap, and a map changed after it is made: silent.
func unknownBySquirrelSetMap(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		sq.Update("payouts").SetMap(map[string]interface{}{"status": trepo.StatusUnknown}).Where(sq.Eq{"reference": p.Reference}).RunWith(db).ExecContext(ctx)
		return err
	}
	return nil
}

func changedSetMap(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout, giveUp bool) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		m := map[string]interface{}{"status": "UNKNOWN"}
		b := sq.Update("payouts").SetMap(m).Where(sq.Eq{"reference": p.Reference})
		if giveUp {
			m["status"] = "FAILED"
		}
		b.RunWith(db).ExecContext(ctx)
		return err
	}
	return nil
}

// UNKNOWN through the builder, and a status that differs by path: silent.
func unknownBySquirrel(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		sq.Update("payouts").Set("status", trepo.StatusUnknown).Where(sq.Eq{"reference": p.Reference}).RunWith(db).ExecContext(ctx)
		return err
	}
	return nil
}

func eitherBySquirrel(ctx context.Context, db *sql.DB, pr *Provider, p *trepo.Payout, giveUp bool) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		b := sq.Update("payouts").Where(sq.Eq{"reference": p.Reference})
		if giveUp {
			b = b.Set("status", "FAILED")
		} else {
			b = b.Set("status", "UNKNOWN")
		}
		b.RunWith(db).ExecContext(ctx)
		return err
	}
	return nil
}

// The setter deferred (it runs after the write) or started in a
// goroutine: silent.
func failDeferredSetter(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		defer p.Fail(err.Error())
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}

func failSetterInGoroutine(ctx context.Context, repo *trepo.Repo, pr *Provider, p *trepo.Payout) error {
	if _, err := pr.Pay(ctx, p); err != nil {
		go p.Fail(err.Error())
		return repo.UpdatePayout(ctx, p)
	}
	return nil
}
