package timeoutfail_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/timeoutfail"
)

func TestTimeoutfail(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), timeoutfail.New(timeoutfail.Config{}), "t")
}
