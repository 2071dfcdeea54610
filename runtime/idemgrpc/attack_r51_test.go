package idemgrpc_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// r51St is a downstream's status error carried by value, holding a float32
// (a latency sample, a score): the one holding the quiet NaN 0x7fc00001 is
// a DeadlineExceeded, the one holding the signalling NaN 0x7f800001 an
// InvalidArgument.
type r51St struct{ F float32 }

func (e r51St) Error() string { return fmt.Sprintf("r51st %#x", math.Float32bits(e.F)) }
func (e r51St) GRPCStatus() *status.Status {
	if math.Float32bits(e.F) == 0x7fc00001 {
		return status.New(codes.DeadlineExceeded, "downstream deadline exceeded")
	}
	return status.New(codes.InvalidArgument, "downstream refused")
}

// idemgrpc package doc: "an error that leaves the outcome unknown (a
// timeout or a cancellation anywhere in the error's tree, or a
// DeadlineExceeded or Canceled status: runtime.Uncertain) is handed to the
// runtime as it is and records UNKNOWN, whatever its code and the error
// policy"; README: "Each error is told by its identity: ... a value by its
// type, the references it holds and its scalars bit for bit".
func TestR51GRPCFloat32NaNStatusesTakenForOne(t *testing.T) {
	joinedStatusesNotFinal(t, "r51", errors.Join(r51St{math.Float32frombits(0x7f800001)}, r51St{math.Float32frombits(0x7fc00001)}))
}
