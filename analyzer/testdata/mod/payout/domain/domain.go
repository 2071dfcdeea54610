// Package domain declares the payout service's types and the interfaces
// it uses.
package domain

import "context"

// The states of a disbursement.
const (
	StatusPending    = "PENDING"
	StatusProcessing = "PROCESSING"
	StatusCompleted  = "COMPLETED"
	StatusFailed     = "FAILED"
	StatusUnknown    = "UNKNOWN"
)

// Disbursement is a payout to one beneficiary.
type Disbursement struct {
	ID            int64
	Reference     string
	Amount        int64
	Status        string
	ProviderRef   string
	FailureReason string
}

// Update is a disbursement's new state, written whole.
type Update struct {
	Reference   string
	ProviderID  int
	ProviderRef string
	Status      string
	FailureCode string
}

// Store keeps disbursements.
type Store interface {
	// Record writes an update (its status included).
	Record(ctx context.Context, u Update) error
	// UpdateDisbursement writes d's status, provider reference and reason.
	UpdateDisbursement(ctx context.Context, d *Disbursement) error
	// SetStatus writes a status.
	SetStatus(ctx context.Context, reference, status string) error
	// Touch records an attempt (its time only).
	Touch(ctx context.Context, d *Disbursement) error
}

// Provider pays a disbursement out.
type Provider interface {
	Name() string
	Disburse(ctx context.Context, d *Disbursement) (string, error)
}
