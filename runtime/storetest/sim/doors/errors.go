package doors

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// timeoutError is a net.Error timeout, as a transport returns.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// wrappedErr is a handler's timeout or cancellation error in the shape
// wrappedNames[v] names: how handlers usually return their downstream's
// failure. Every one of them leaves the effect's outcome unknown.
func wrappedErr(v int) error {
	switch v {
	case 0:
		return fmt.Errorf("charging: %w", context.DeadlineExceeded)
	case 1:
		return fmt.Errorf("charging: %w", &url.Error{Op: "Post", URL: "https://psp.invalid/charges", Err: timeoutError{}})
	case 2:
		return fmt.Errorf("charging: waiting for the reply: %w", context.Canceled)
	case 3:
		return status.Error(codes.DeadlineExceeded, "psp: deadline exceeded")
	case 4:
		return status.Error(codes.Canceled, "psp: call canceled")
	}
	return errors.Join(errors.New("charging: psp did not answer"), fmt.Errorf("reading reply: %w", context.DeadlineExceeded))
}
