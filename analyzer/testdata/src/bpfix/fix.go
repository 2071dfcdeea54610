// Package bpfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package bpfix

import (
	"context"

	"bpimpl"
	"bpsvc"
)

func charge(ctx context.Context, s *bpimpl.Service) error {
	_, err := s.Charge(ctx, bpsvc.ChargeRequest{}) //idemlint:ignore bypas a replay tool // want `idemlint:ignore names no rule "bypas"; did you mean bypass\?` `is called at fix\.go:13:12 on the concrete`
	return err
}
