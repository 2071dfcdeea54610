package generator

import (
	"bytes"
	"go/format"
	"go/token"
	"testing"
	"time"

	"github.com/dave/jennifer/jen"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"Payments":      "payments",
		"payments":      "payments",
		"HTTPServer":    "http_server",
		"OrderAPI":      "order_api",
		"OrderAPIStore": "order_api_store",
		"V2Payments":    "v2_payments",
		"Payments2":     "payments2",
		"X":             "x",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPathBase(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/jackc/pgx/v5":         "pgx",
		"github.com/idemkit/idem/runtime": "runtime",
		"encoding/json":                   "json",
		"context":                         "context",
		"example.com/v2":                  "example.com",
		"gopkg.in/yaml.v3":                "yaml.v3",
	} {
		if got := pathBase(in); got != want {
			t.Errorf("pathBase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, c := range []struct {
		d        time.Duration
		text     string
		rendered string
	}{
		{24 * time.Hour, "24h", "24 * time.Hour"},
		{time.Hour, "1h", "time.Hour"},
		{90 * time.Minute, "1h30m", "90 * time.Minute"},
		{30 * time.Second, "30s", "30 * time.Second"},
		{1500 * time.Millisecond, "1.5s", "1500 * time.Millisecond"},
		{10 * time.Millisecond, "10ms", "10 * time.Millisecond"},
		{1500 * time.Nanosecond, "1.5µs", "time.Duration(1500)"},
	} {
		if got := fmtDuration(c.d); got != c.text {
			t.Errorf("fmtDuration(%v) = %q, want %q", c.d, got, c.text)
		}
		if got := jen.Var().Id("_").Op("=").Add(durationExpr(c.d)).GoString(); got != "var _ = "+c.rendered {
			t.Errorf("durationExpr(%v) = %q, want %q", c.d, got, c.rendered)
		}
	}
}

func TestParsePos(t *testing.T) {
	for in, want := range map[string]token.Position{
		"/a/b.go:3:7": {Filename: "/a/b.go", Line: 3, Column: 7},
		"/a/b.go:3":   {Filename: "/a/b.go", Line: 3},
		"c:/x.go:1:2": {Filename: "c:/x.go", Line: 1, Column: 2},
		"":            {},
		"-":           {},
	} {
		if got := parsePos(in); got != want {
			t.Errorf("parsePos(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestGroupImports(t *testing.T) {
	src := []byte("package p\n\nimport (\n\t\"context\"\n\tidem \"github.com/idemkit/idem/runtime\"\n\t\"time\"\n)\n\nvar _ = context.TODO\nvar _ = idem.New\nvar _ = time.Now\n")
	want := []byte("package p\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\tidem \"github.com/idemkit/idem/runtime\"\n)\n\nvar _ = context.TODO\nvar _ = idem.New\nvar _ = time.Now\n")
	got := groupImports(src)
	if !bytes.Equal(got, want) {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if f, err := format.Source(got); err != nil || !bytes.Equal(f, got) {
		t.Fatalf("grouped imports are not gofmt-clean: %v", err)
	}
	only := []byte("package p\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n")
	if got := groupImports(only); !bytes.Equal(got, only) {
		t.Fatalf("a block of standard imports changed:\n%s", got)
	}
}

func TestNamer(t *testing.T) {
	n := namer{"idem": true, "w": true, "w2": true}
	for _, c := range []struct{ base, want string }{
		{"idem", "idem2"}, {"w", "w3"}, {"err", "err"}, {"err", "err2"},
		{"string", "string2"}, {"type", "type2"}, {"_", "_2"},
	} {
		if got := n.fresh(c.base); got != c.want {
			t.Errorf("fresh(%q) = %q, want %q", c.base, got, c.want)
		}
	}
}
