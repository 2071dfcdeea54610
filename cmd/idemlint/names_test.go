package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestUnmatchedNames: a configured name that matches nothing in the
// loaded program (a copied example, a typo, a package not built) is
// warned about, once, and changes neither the findings nor the exit status.
func TestUnmatchedNames(t *testing.T) {
	bin := idemlintBinary(t)
	dir := writeModule(t, bad)
	config := `{
  "netfuncs": ["example.com/shop/shop.notify", "(*net/http.Client).Do", "(example.com/pay.Gateway).Charge", "example.com/shop/shop.Notify"],
  "txtypes": ["example.com/shop/shop.Tx"],
  "failfuncs": ["(*example.com/shop/shop.Store).MarkLost"],
  "tokendels": ["(database/sql.Tx).Rollback"]
}`
	if err := os.WriteFile(filepath.Join(dir, ".idemlint.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, dir, bin, "-txrpc.txrunners=example.com/nowhere.WithTx", "./...")
	if code != 3 {
		t.Errorf("exit %d, want 3; stderr:\n%s", code, stderr)
	}
	got := regexp.MustCompile(`(?m)^idemlint: warning: .*$`).FindAllString(stderr, -1)
	want := []string{
		`idemlint: warning: netfuncs: "(example.com/pay.Gateway).Charge" matches nothing: no package example.com/pay in the program`,
		`idemlint: warning: netfuncs: "example.com/shop/shop.Notify" matches nothing: example.com/shop/shop has no function Notify`,
		`idemlint: warning: txrunners: "example.com/nowhere.WithTx" matches nothing: no package example.com/nowhere in the program`,
		`idemlint: warning: txtypes: "example.com/shop/shop.Tx" matches nothing: example.com/shop/shop has no type Tx`,
		`idemlint: warning: failfuncs: "(*example.com/shop/shop.Store).MarkLost" matches nothing: example.com/shop/shop has no type Store`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s\nstderr:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), stderr)
	}
	if !strings.Contains(stderr, "shop.go:19:12:") {
		t.Errorf("the finding is missing:\n%s", stderr)
	}
}
