package serverkey_test

import (
	"testing"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

// Retry loops around the idem client transports (idemhttp.Transport,
// idemgrpc's interceptor): a key fixed before the loop is silent, one
// minted per attempt (WithKey, WithNewKey, a NewKey header) is reported.
func TestServerkeyClientTransports(t *testing.T) {
	results := rules.Results(t, "skclient")
	ruletest.CheckFindings(t, results, 4)
}
