// Package domain holds the service's types and the interfaces the
// application layer calls.
package domain

import (
	"context"

	"github.com/gobuffalo/pop/v6"
)

type Payment struct {
	ID     string
	Amount int64
	Status string
}

type Invoice struct {
	ID    int64
	Hash  string
	State string
}

type LedgerEntry struct {
	ID        int64
	PaymentID string
	Kind      string
	Amount    int64
}

// IdempotencyKey is the token table's row.
type IdempotencyKey struct {
	Key    string
	Status string
}

type Order struct {
	ID    string
	State string
}

// UserService is implemented over HTTP (adapters/httpusers).
type UserService interface {
	NotifyUser(ctx context.Context, userID, text string) error
}

// OAuthProvider is implemented over HTTP (adapters/oauth).
type OAuthProvider interface {
	Discover(ctx context.Context) (string, error)
	Exchange(ctx context.Context, code string) (string, error)
}

// LNClient pays Lightning invoices (adapters/lnd).
type LNClient interface {
	PayInvoice(ctx context.Context, bolt11 string) (string, error)
	LookupInvoice(ctx context.Context, hash string) (string, error)
}

// Mailer sends email (adapters/mail).
type Mailer interface {
	SendMail(ctx context.Context, to, body string) error
}

// SMSSender sends text messages (adapters/sms).
type SMSSender interface {
	SendSMS(ctx context.Context, to, body string) error
}

// EventPublisher publishes over HTTP or into the outbox table of the same
// transaction (adapters/events): which one is bound cannot be told.
type EventPublisher interface {
	Publish(ctx context.Context, topic, payload string) error
}

// PaymentGateway charges cards (adapters/gateway).
type PaymentGateway interface {
	Charge(ctx context.Context, id string, amount int64) error
	GetPaymentStatus(ctx context.Context, id string) (string, error)
}

// Payments is the payment store (adapters/store).
type Payments interface {
	HandleFailedPayment(ctx context.Context, id string) error
	ReleaseReservation(ctx context.Context, id string) error
}

// KeyRepo keeps idempotency keys in Redis (adapters/redisrepo).
type KeyRepo interface {
	Get(ctx context.Context, key string) (string, error)
	Set(ctx context.Context, key, val string) error
	SetNX(ctx context.Context, key, val string) (bool, error)
	Del(ctx context.Context, key string) error
}

// Cache is a read-through cache (adapters/redisrepo).
type Cache interface {
	Get(ctx context.Context, key string) (string, error)
	Set(ctx context.Context, key, val string) error
}

// OrderRepo updates an order in one Firestore transaction
// (adapters/firestorerepo).
type OrderRepo interface {
	UpdateOrder(ctx context.Context, id string, fn func(ctx context.Context, o *Order) (*Order, error)) error
}

// Persister hands out pop transactions (adapters/poppersist).
type Persister interface {
	Transaction(ctx context.Context, fn func(ctx context.Context, tx *pop.Connection) error) error
}
