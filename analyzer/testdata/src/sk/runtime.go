// Package sk holds serverkey's cases: each positive case is followed by
// its must-not-flag twin.
package sk

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/jackc/pgx/v5"
)

type Req struct{ OrderID string }
type Resp struct{}

func effect(ctx context.Context, r Req) (Resp, error) { return Resp{}, nil }

func txEffect(ctx context.Context, tx pgx.Tx, r Req) (Resp, error) { return Resp{}, nil }

// 1. uuid.NewString() as the key of runtime.Do.
func charge(ctx context.Context, rt *runtime.Runtime, r Req) error {
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: uuid.NewString(), Request: r, Effect: effect}) // want `the idempotency key of this runtime.Call is minted on the server \(uuid.NewString\(\) at runtime\.go:29:86\)`
	return err
}

func chargeClientKey(ctx context.Context, rt *runtime.Runtime, hr *http.Request, r Req) error {
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: hr.Header.Get("Idempotency-Key"), Request: r, Effect: effect})
	return err
}

// 2. Through a variable.
func chargeVar(ctx context.Context, rt *runtime.Runtime, r Req) error {
	key := uuid.New().String()
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: key, Request: r, Effect: effect}) // want `the idempotency key of this runtime.Call is minted on the server \(uuid.New\(\) at runtime\.go:40:9\)`
	return err
}

// Minted once, before the retry loop, and reused on every attempt.
func chargeRetried(ctx context.Context, rt *runtime.Runtime, r Req) error {
	key := uuid.New().String()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if _, err = runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: key, Request: r, Effect: effect}); err == nil {
			return nil
		}
	}
	return err
}

// 3. time.Now() in the key.
func chargeTime(ctx context.Context, rt *runtime.Runtime, r Req) error {
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: fmt.Sprintf("%s-%d", r.OrderID, time.Now().UnixNano()), Request: r, Effect: effect}) // want `the idempotency key of this runtime.Call is minted on the server \(time.Now\(\) at runtime\.go:59:118\)`
	return err
}

// A daily window key is deliberate: the same all day.
func settleDaily(ctx context.Context, rt *runtime.Runtime, r Req) error {
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "ledger.Settle", Key: "settle:" + time.Now().Format("2006-01-02"), Request: r, Effect: effect})
	return err
}

// 4. rand, assigned to the field of a Call variable.
func chargeRand(ctx context.Context, rt *runtime.Runtime, r Req) error {
	c := runtime.Call[Req, Resp]{Operation: "pay.Charge", Request: r, Effect: effect}
	c.Key = strconv.Itoa(rand.Int()) // want `the idempotency key of this runtime.Call is minted on the server \(rand.Int\(\) at runtime\.go:72:23\)`
	_, err := runtime.Do(ctx, rt, c)
	return err
}

func chargeOrderKey(ctx context.Context, rt *runtime.Runtime, r Req) error {
	c := runtime.Call[Req, Resp]{Operation: "pay.Charge", Request: r, Effect: effect}
	c.Key = r.OrderID
	_, err := runtime.Do(ctx, rt, c)
	return err
}

// 5. A counter as the key of pgstore.DoTx.
var seq int64

func createOrder(ctx context.Context, rt *runtime.Runtime, tx pgx.Tx, r Req) error {
	_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[Req, Resp]{Operation: "shop.CreateOrder", Key: strconv.FormatInt(atomic.AddInt64(&seq, 1), 10), Request: r, Effect: txEffect}) // want `the idempotency key of this pgstore.TxCall is minted on the server \(the counter atomic.AddInt64\(\) at runtime\.go:88:118\)`
	return err
}

func createOrderKeyed(ctx context.Context, rt *runtime.Runtime, tx pgx.Tx, r Req) error {
	_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[Req, Resp]{Operation: "shop.CreateOrder", Key: r.OrderID, Request: r, Effect: txEffect})
	return err
}

// 6. Suppressed with a reason; and a directive without one.
func suppressed(ctx context.Context, rt *runtime.Runtime, r Req) error {
	//idemlint:ignore serverkey a one-off backfill: each row runs once by construction
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "backfill", Key: uuid.NewString(), Request: r, Effect: effect})
	return err
}

func noReason(ctx context.Context, rt *runtime.Runtime, r Req) error {
	//idemlint:ignore serverkey // want `idemlint:ignore serverkey needs a reason`
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "backfill2", Key: uuid.NewString(), Request: r, Effect: effect}) // want `the idempotency key of this runtime.Call is minted on the server \(uuid.NewString\(\) at runtime\.go:106:85\)`
	return err
}
