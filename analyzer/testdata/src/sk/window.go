package sk

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Window keys stay window keys through .UTC(), .In(loc) and .Truncate(d),
// in the Call or through a variable.
func settleDailyUTC(ctx context.Context, rt *runtime.Runtime, r Req, loc *time.Location) error {
	key := "settlement:" + r.OrderID + ":" + time.Now().UTC().Format("2006-01-02")
	if _, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "ledger.Settle", Key: key, Request: r, Effect: effect}); err != nil {
		return err
	}
	if _, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "ledger.Settle", Key: "settle:" + time.Now().In(loc).Format("2006-01-02"), Request: r, Effect: effect}); err != nil {
		return err
	}
	hour := time.Now().UTC().Truncate(time.Hour).Unix()
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "ledger.Settle", Key: fmt.Sprint(r.OrderID, hour), Request: r, Effect: effect})
	return err
}

// 3'. .UTC() keeps a fresh value fresh.
func chargeTimeUTC(ctx context.Context, rt *runtime.Runtime, r Req) error {
	key := r.OrderID + ":" + time.Now().UTC().Format(time.RFC3339Nano)
	_, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: "pay.Charge", Key: key, Request: r, Effect: effect}) // want `the idempotency key of this runtime.Call is minted on the server \(time.Now\(\) at window.go:28:27\)`
	return err
}
