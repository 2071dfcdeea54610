package templates

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/queries"
)

func TestMigrationCarriesTheSchema(t *testing.T) {
	got, err := Migration("idemgen v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	header, body, ok := strings.Cut(got, "\n\n")
	if !ok {
		t.Fatalf("no blank line between header and schema:\n%s", got)
	}
	if !strings.Contains(header, "idemgen v1.2.3") || !strings.HasPrefix(header, "-- ") {
		t.Errorf("header = %q", header)
	}
	if body != queries.Schema {
		t.Errorf("rendered schema differs from queries.Schema:\n%s", body)
	}
	again, _ := Migration("idemgen v1.2.3")
	if again != got {
		t.Error("rendering is not deterministic")
	}
}
