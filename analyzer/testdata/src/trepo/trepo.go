// Package trepo is a payout repository whose methods write a status
// given to them, as a parameter or as a field of one: its StatusWriter
// facts are read by tflow's calls.
package trepo

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"
)

type Status string

const (
	StatusPending   Status = "PENDING"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
	StatusUnknown   Status = "UNKNOWN"
)

// Payout is a row of payouts.
type Payout struct {
	ID            int64
	Reference     string
	Status        Status
	ProviderRef   string
	FailureReason string
	Retries       int
}

// Repo keeps payouts.
type Repo struct {
	pool *pgxpool.Pool
	db   *sql.DB
	gdb  *gorm.DB
}

// UpdatePayout writes p.Status (and the provider's reference) into
// payouts.status: the text in a local variable, the status a field of the
// struct it is given.
func (r *Repo) UpdatePayout(ctx context.Context, p *Payout) error { // want UpdatePayout:`writes param 2 \(field Status\) into payouts.status`
	query := "UPDATE payouts SET status = $2, provider_reference = $3, failure_reason = $4, updated_at = now() WHERE reference = $1"
	_, err := r.pool.Exec(ctx, query, p.Reference, string(p.Status), p.ProviderRef, p.FailureReason)
	return err
}

// SaveAttempt writes the provider's reference only: the status it is
// given is not written.
func (r *Repo) SaveAttempt(ctx context.Context, p *Payout) error {
	_, err := r.pool.Exec(ctx, "UPDATE payouts SET provider_reference = $2, updated_at = now() WHERE reference = $1", p.Reference, p.ProviderRef)
	return err
}

// SetValue writes v into payouts.status, v named for neither.
func (r *Repo) SetValue(ctx context.Context, ref string, v Status) error { // want SetValue:`writes param 3 into payouts.status`
	_, err := r.db.ExecContext(ctx, "UPDATE payouts SET status = ? WHERE reference = ?", v, ref)
	return err
}

// BumpRetries reads the status it is given in its WHERE only: it writes no
// status.
func (r *Repo) BumpRetries(ctx context.Context, ref string, status Status) error {
	_, err := r.db.ExecContext(ctx, "UPDATE payouts SET retries = retries + 1 WHERE reference = $1 AND status = $2", ref, status)
	return err
}

// Insert writes a whole payout, its status included.
func (r *Repo) Insert(ctx context.Context, p Payout) error { // want Insert:`writes param 2 \(field Status\) into payouts.status`
	_, err := r.db.ExecContext(ctx, "INSERT INTO payouts (reference, status, provider_reference) VALUES ($1, $2, $3)", p.Reference, p.Status, p.ProviderRef)
	return err
}

// Save writes the model through gorm, its Status field included.
func (r *Repo) Save(ctx context.Context, p *Payout) error { // want Save:`writes param 2 \(field Status\)`
	return r.gdb.WithContext(ctx).Save(p).Error
}

// Fail is a setter: it sets the payout FAILED, with the provider's reason.
func (p *Payout) Fail(reason string) { // want Fail:`sets field Status of param 0 to "FAILED"`
	p.Status = StatusFailed
	p.FailureReason = reason
}

// Transition is a setter of the state it is given.
func (p *Payout) Transition(to Status) { // want Transition:`sets field Status of param 0 to param 1`
	p.Status = to
}

// FailIf sets FAILED on one path only: not a setter.
func (p *Payout) FailIf(giveUp bool) {
	if giveUp {
		p.Status = StatusFailed
	}
}

// Normalize reads the status and may change it: not a setter.
func (p *Payout) Normalize() {
	if p.Status == "" {
		p.Status = StatusPending
	}
}

// Resolve sets the status it is given, then hands the payout to a hook,
// which may set it again: not a setter.
func (p *Payout) Resolve(to Status, hook func(*Payout)) { // want Resolve:`callsparams\(\[2\]\)`
	p.Status = to
	hook(p)
}

// Record is what every row holds, its status among it.
type Record struct {
	ID     int64
	Status Status
}

// Reject is a setter of the record's status.
func (r *Record) Reject() { // want Reject:`sets field Status of param 0 to "FAILED"`
	r.Status = StatusFailed
}

// Transfer embeds a Record: its status is the record's.
type Transfer struct {
	Record
	Reference string
	Amount    int64
}

// UpdateTransfer writes the transfer's status, promoted from its Record,
// into transfers.status.
func (r *Repo) UpdateTransfer(ctx context.Context, t *Transfer) error { // want UpdateTransfer:`writes param 2 \(field Record.Status\) into transfers.status`
	_, err := r.pool.Exec(ctx, "UPDATE transfers SET status = $2 WHERE reference = $1", t.Reference, t.Status)
	return err
}

// SaveTransfer writes the transfer through gorm, its Record's status
// included.
func (r *Repo) SaveTransfer(ctx context.Context, t *Transfer) error { // want SaveTransfer:`writes param 2 \(field Record.Status\)`
	return r.gdb.WithContext(ctx).Save(t).Error
}
