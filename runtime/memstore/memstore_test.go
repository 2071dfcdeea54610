package memstore_test

import (
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) runtime.Store { return memstore.New() })
}
