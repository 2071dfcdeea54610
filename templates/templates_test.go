package templates

import (
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/queries"
)

func TestSchemaMatchesQueries(t *testing.T) {
	if Schema != queries.Schema {
		t.Fatalf("templates/schema.sql differs from queries/schema.sql; copy it over:\n%s", firstDiff(Schema, queries.Schema))
	}
	if !strings.Contains(Schema, "CREATE TABLE IF NOT EXISTS idem_records") {
		t.Fatal("the schema does not create idem_records")
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  templates: " + x + "\n  queries:   " + y
		}
	}
	return ""
}
