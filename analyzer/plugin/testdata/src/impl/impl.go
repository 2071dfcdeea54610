package impl

import (
	"context"

	"pay"
)

type Service struct{}

func (*Service) Charge(ctx context.Context, req pay.Req) error { return nil }
