package txrpc_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/txrpc"
)

func TestTxrpc(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), txrpc.New(txrpc.Config{}), "a")
}
