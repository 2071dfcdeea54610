// Package command is the application layer: it sees only domain's
// interfaces. Labels: see ../../README.md.
package command

import (
	"context"
	"database/sql"

	"entgo.io/ent/dialect"
	"github.com/gobuffalo/pop/v6"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
	"gorm.io/gorm"

	"example.com/orm/corpus/adapters/store"
	"example.com/orm/corpus/domain"
	"example.com/orm/txrpc/enttx"
	"example.com/orm/txrpc/enttx/ent"
)

var _ dialect.Driver

// Service wires the interfaces (bound in handlers).
type Service struct {
	Gorm      *gorm.DB
	Bun       *bun.DB
	BunIDB    bun.IDB
	Sqlx      *sqlx.DB
	SQL       *sql.DB
	Pool      *pgxpool.Pool
	Pop       *pop.Connection
	Ent       *ent.Client
	RDB       *redis.Client
	Store     *store.Store
	Users     domain.UserService
	OAuth     domain.OAuthProvider
	LN        domain.LNClient
	Mail      domain.Mailer
	SMS       domain.SMSSender
	Events    domain.EventPublisher
	Gateway   domain.PaymentGateway
	Payments  domain.Payments
	Keys      domain.KeyRepo
	Cache     domain.Cache
	Orders    domain.OrderRepo
	Persister domain.Persister
}

func (s *Service) GormTransactionNotify(ctx context.Context, p *domain.Payment) error {
	return s.Gorm.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(p).Error; err != nil {
			return err
		}
		return s.Users.NotifyUser(ctx, p.ID, "paid") // want txrpc
	})
}

func (s *Service) GormBeginMail(ctx context.Context, p *domain.Payment) error {
	tx := s.Gorm.WithContext(ctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	defer tx.Rollback()
	if err := tx.Create(p).Error; err != nil {
		return err
	}
	if err := s.Mail.SendMail(ctx, "a@example.com", "receipt"); err != nil { // want txrpc
		return err // want timeoutfail
	}
	return tx.Commit().Error
}

func (s *Service) BunRunInTxPay(ctx context.Context, inv *domain.Invoice) error {
	return s.Bun.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(inv).Exec(ctx); err != nil {
			return err
		}
		_, err := s.LN.PayInvoice(ctx, inv.Hash) // want txrpc
		return err
	})
}

func (s *Service) BunBeginSMS(ctx context.Context, inv *domain.Invoice) error {
	tx, err := s.Bun.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.NewInsert().Model(inv).Exec(ctx); err != nil {
		return err
	}
	if err := s.SMS.SendSMS(ctx, "+100", "code"); err != nil { // want txrpc
		return err // want timeoutfail
	}
	return tx.Commit()
}

func (s *Service) BunIDBNotify(ctx context.Context, id string) error {
	return s.BunIDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return s.Users.NotifyUser(ctx, id, "hi") // want txrpc
	})
}

func (s *Service) SqlxBeginxCharge(ctx context.Context, p *domain.Payment) error {
	tx, err := s.Sqlx.Beginx()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx.MustExec("INSERT INTO payments (id, status) VALUES ($1, 'PROCESSING')", p.ID)
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil { // want txrpc
		return err // want timeoutfail
	}
	return tx.Commit()
}

func (s *Service) SqlxMustBeginWebhook(ctx context.Context, p *domain.Payment) error {
	tx := s.Sqlx.MustBeginTx(ctx, nil)
	tx.MustExec("UPDATE payments SET status = 'PAID' WHERE id = $1", p.ID)
	if err := s.Events.Publish(ctx, "payment.paid", p.ID); err != nil { // negative: outbox or HTTP, cannot be told
		_ = tx.Rollback()
		return err
	}
	if err := postWebhook(ctx, p.ID); err != nil { // want txrpc
		_ = tx.Rollback() // want timeoutfail
		return err
	}
	return tx.Commit()
}

func (s *Service) EntTxWebhook(ctx context.Context, id int) error {
	tx, err := s.Ent.Tx(ctx)
	if err != nil {
		return err
	}
	if err := tx.Payment.UpdateOneID(id).SetStatus("PAID").Exec(ctx); err != nil {
		return tx.Rollback()
	}
	if err := postWebhook(ctx, "pay"); err != nil { // want txrpc
		return tx.Rollback() // want timeoutfail
	}
	return tx.Commit()
}

func (s *Service) EntWithTxMail(ctx context.Context, id int) error {
	return enttx.WithTx(ctx, s.Ent, func(tx *ent.Tx) error {
		if err := tx.Payment.UpdateOneID(id).SetStatus("PAID").Exec(ctx); err != nil {
			return err
		}
		return s.Mail.SendMail(ctx, "a@example.com", "paid") // want txrpc
	})
}

func (s *Service) PopTransactionExchange(ctx context.Context, code string) error {
	return s.Pop.Transaction(func(tx *pop.Connection) error {
		if err := tx.RawQuery("UPDATE identities SET code = ? WHERE code = ?", "", code).Exec(); err != nil {
			return err
		}
		_, err := s.OAuth.Exchange(ctx, code) // want txrpc
		return err
	})
}

func (s *Service) PersisterNotify(ctx context.Context, id string) error {
	return s.Persister.Transaction(ctx, func(ctx context.Context, tx *pop.Connection) error {
		if err := tx.RawQuery("UPDATE users SET confirmed = true WHERE id = ?", id).Exec(); err != nil {
			return err
		}
		return s.Users.NotifyUser(ctx, id, "confirmed") // want txrpc
	})
}

func (s *Service) OrderRepoShip(ctx context.Context, id string) error {
	return s.Orders.UpdateOrder(ctx, id, func(ctx context.Context, o *domain.Order) (*domain.Order, error) {
		if err := s.SMS.SendSMS(ctx, "+100", "shipped"); err != nil { // want txrpc
			return nil, err
		}
		o.State = "SHIPPED"
		return o, nil
	})
}

func (s *Service) StoreInTxMail(ctx context.Context, p *domain.Payment) error {
	return s.Store.InTx(ctx, func(tx *gorm.DB) error {
		if err := tx.Save(p).Error; err != nil {
			return err
		}
		return s.Mail.SendMail(ctx, "a@example.com", "saved") // want txrpc
	})
}

func (s *Service) StoreAtomicallyCharge(ctx context.Context, p *domain.Payment) error {
	return s.Store.Atomically(ctx, func(ctx context.Context) error {
		return s.Gateway.Charge(ctx, p.ID, p.Amount) // want txrpc
	})
}

// WithTx is the service's own runner over database/sql.
func WithTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *Service) OwnRunnerDiscover(ctx context.Context, id string) error {
	return WithTx(ctx, s.SQL, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE users SET seen = now() WHERE id = $1", id); err != nil {
			return err
		}
		_, err := s.OAuth.Discover(ctx) // want txrpc
		return err
	})
}

func (s *Service) SQLTxRedis(ctx context.Context, id string) error {
	tx, err := s.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE users SET plan = 'pro' WHERE id = $1", id); err != nil {
		return err
	}
	if err := s.RDB.Publish(ctx, "plans", id).Err(); err != nil { // want txrpc
		return err
	}
	return tx.Commit()
}

func (s *Service) PgxBeginFuncCharge(ctx context.Context, p *domain.Payment) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE payments SET status = 'PROCESSING' WHERE id = $1", p.ID); err != nil {
			return err
		}
		return s.Gateway.Charge(ctx, p.ID, p.Amount) // want txrpc
	})
}

// notifyOwner is a layer of the application's own between the
// transaction and the interface.
func (s *Service) notifyOwner(ctx context.Context, id string) error {
	return s.Users.NotifyUser(ctx, id, "owner")
}

func (s *Service) GormThroughHelper(ctx context.Context, p *domain.Payment) error {
	return s.Gorm.Transaction(func(tx *gorm.DB) error {
		if err := tx.Save(p).Error; err != nil {
			return err
		}
		return s.notifyOwner(ctx, p.ID) // want txrpc
	})
}

func (s *Service) GormMethodValue(ctx context.Context, inv *domain.Invoice) error {
	pay := s.LN.PayInvoice
	return s.Gorm.Transaction(func(tx *gorm.DB) error {
		if err := tx.Save(inv).Error; err != nil {
			return err
		}
		_, err := pay(ctx, inv.Hash) // want txrpc
		return err
	})
}

// OutboxInTx publishes through the EventPublisher inside the transaction.
// negative: the outbox implementation writes into the same transaction;
// the HTTP one would not, and which is bound cannot be told.
func (s *Service) OutboxInTx(ctx context.Context, id string) error {
	tx, err := s.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'PAID' WHERE id = $1", id); err != nil {
		return err
	}
	if err := s.Events.Publish(ctx, "order.paid", id); err != nil {
		return err
	}
	return tx.Commit()
}

// AfterCommit notifies after the commit.
// negative: no transaction is open at the call.
func (s *Service) AfterCommit(ctx context.Context, p *domain.Payment) error {
	if err := s.Gorm.Transaction(func(tx *gorm.DB) error { return tx.Save(p).Error }); err != nil {
		return err
	}
	return s.Users.NotifyUser(ctx, p.ID, "saved")
}

// ScopeIsNoTx uses a gorm scope.
// negative: a scope is not a transaction callback.
func (s *Service) ScopeIsNoTx(ctx context.Context, id string) error {
	var p domain.Payment
	return s.Gorm.Scopes(func(d *gorm.DB) *gorm.DB {
		_ = s.Users.NotifyUser(ctx, id, "scoped")
		return d.Where("id = ?", id)
	}).First(&p).Error
}

// ShipAfter changes the order in its transaction and texts afterwards.
// negative: the SMS goes out after the transaction.
func (s *Service) ShipAfter(ctx context.Context, id string) error {
	if err := s.Orders.UpdateOrder(ctx, id, func(ctx context.Context, o *domain.Order) (*domain.Order, error) {
		o.State = "SHIPPED"
		return o, nil
	}); err != nil {
		return err
	}
	return s.SMS.SendSMS(ctx, "+100", "shipped")
}

func postWebhook(ctx context.Context, id string) error {
	return postJSON(ctx, "https://hooks.example/"+id)
}
