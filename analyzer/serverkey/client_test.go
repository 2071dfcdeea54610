package serverkey_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/serverkey"
)

// Retry loops around the idem client transports (idemhttp.Transport,
// idemgrpc's interceptor): a key fixed before the loop is silent, one
// minted per attempt (WithKey, WithNewKey, a NewKey header) is reported.
func TestServerkeyClientTransports(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), serverkey.New(serverkey.Config{}), "skclient")
	ruletest.CheckFindings(t, results, 4)
}
