package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

const bad = `package shop

import (
	"context"
	"database/sql"
	"net/http"
)

// Charge calls the gateway while the transaction is open.
func Charge(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET state='PROCESSING' WHERE id=$1 AND state='NEW'", id); err != nil {
		return err
	}
	if err := notify(ctx, id); err != nil {
		return err
	}
	return tx.Commit()
}

func notify(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://pay.example/charge?id="+id, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
`

const good = `package shop

import (
	"context"
	"database/sql"
	"net/http"
)

// Charge commits PROCESSING, then calls the gateway with no transaction open.
func Charge(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET state='PROCESSING' WHERE id=$1 AND state='NEW'", id); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return notify(ctx, id)
}

func notify(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://pay.example/charge?id="+id, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
`

// badNet is bad with its network call made through package net rather
// than net/http: go vet runs the tool on every package the module
// imports, once per set of analyzer flags (they are part of go vet's cache
// key), and net's import closure is a third of net/http's (75 standard
// packages with database/sql, against 185): the vet runs with flags use
// it (about 5 s of CPU each, against 14 s). Under go vet its dial is a
// read-only leaf (no timeoutfail finding) until -txrpc.netfuncs names
// shop.notify.
var badNet = strings.NewReplacer(
	`"net/http"`, `"net"`,
	`	req, err := http.NewRequestWithContext(ctx, "POST", "https://pay.example/charge?id="+id, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()`, `	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", "pay.example:443")
	if err != nil {
		return err
	}
	_, err = conn.Write([]byte(id))
	conn.Close()
	return err`,
).Replace(bad)

func writeModule(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/shop\n\ngo 1.26\n",
		"shop/shop.go": src,
	}
	writeInto(t, dir, files)
	return dir
}

func run(t *testing.T, dir string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runEnv(t, dir, nil, name, args...)
}

// runEnv is run with env added to the environment.
func runEnv(t *testing.T, dir string, env []string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS="+testenv.ChildGoFlags()), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return o.String(), e.String(), code
}

func TestEndToEnd(t *testing.T) {
	bin := idemlintBinary(t)
	badDir := writeModule(t, bad)
	goodDir := writeModule(t, good)

	t.Run("direct", func(t *testing.T) {
		_, stderr, code := run(t, badDir, bin, "./...")
		if code != 3 {
			t.Errorf("exit %d, want 3; stderr:\n%s", code, stderr)
		}
		for _, want := range []string{
			"shop.go:19:12: shop.notify (called at shop.go:19:12) may do network I/O (shop.notify -> (*http.Client).Do, leaf call (*http.Client).Do at shop.go:30:15) while the database transaction begun at shop.go:11:13 is open",
			"shop.go:11:13: \ttransaction begun here",
			"shop.go:30:15: \tleaf network call: (*http.Client).Do",
			"shop.go:20:3: the error of shop.notify (called at shop.go:19:12; shop.notify -> (*http.Client).Do, leaf call at shop.go:30:15), a call that may do network I/O (a notification), reaches an action at shop.go:20:3 that returns, so the deferred Rollback undoes the transaction holding the intent",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		_, stderr, code = run(t, goodDir, bin, "./...")
		if code != 0 || stderr != "" {
			t.Errorf("clean module: exit %d, stderr:\n%s", code, stderr)
		}
	})

	t.Run("disabled", func(t *testing.T) {
		_, stderr, code := run(t, badDir, bin, "-txrpc=false", "./...")
		if code != 3 || strings.Contains(stderr, "transaction begun") || !strings.Contains(stderr, "the error of shop.notify") {
			t.Errorf("-txrpc=false: exit %d, stderr:\n%s", code, stderr)
		}
		_, stderr, code = run(t, badDir, bin, "-txrpc=false", "-timeoutfail=false", "./...")
		if code != 0 {
			t.Errorf("-txrpc=false -timeoutfail=false: exit %d, stderr:\n%s", code, stderr)
		}
		_, stderr, code = run(t, badDir, bin, "-tokenorder", "./...")
		if code != 0 {
			t.Errorf("-tokenorder only: exit %d, stderr:\n%s", code, stderr)
		}
	})

	t.Run("json", func(t *testing.T) {
		stdout, stderr, code := run(t, badDir, bin, "-json", "./...")
		if code != 0 {
			t.Errorf("-json: exit %d; stderr:\n%s", code, stderr)
		}
		var tree map[string]map[string][]struct {
			Posn    string `json:"posn"`
			Message string `json:"message"`
			Related []struct {
				Posn    string `json:"posn"`
				Message string `json:"message"`
			} `json:"related"`
		}
		if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
			t.Fatalf("-json output: %v\n%s", err, stdout)
		}
		if n := len(tree["example.com/shop/shop"]["timeoutfail"]); n != 1 {
			t.Errorf("timeoutfail diagnostics = %d, want 1", n)
		}
		diags := tree["example.com/shop/shop"]["txrpc"]
		if len(diags) != 1 {
			t.Fatalf("txrpc diagnostics = %d, want 1:\n%s", len(diags), stdout)
		}
		var rel []string
		for _, r := range diags[0].Related {
			rel = append(rel, r.Message)
		}
		if !strings.Contains(strings.Join(rel, "|"), "transaction begun here") || !strings.Contains(strings.Join(rel, "|"), "leaf network call: (*http.Client).Do") {
			t.Errorf("related = %q", rel)
		}
	})

	t.Run("version", func(t *testing.T) {
		// Anywhere, even where the configuration does not load.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ".idemlint.json"), []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := run(t, dir, bin, "-version")
		// A test's build has no module version: go build in a checkout.
		if code != 0 || !regexp.MustCompile(`^idemlint (\(devel\)|v\S+)( revision [0-9a-f]+( \(modified\))?)? go1\.\S+\n$`).MatchString(stdout) {
			t.Errorf("-version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// go vet's handshake is the per-package driver's, not -version's:
		// the go command keys its cache on this line.
		stdout, stderr, code = run(t, goodDir, bin, "-V=full")
		if code != 0 || !regexp.MustCompile(`^\S*idemlint version devel comments-go-here buildID=[0-9a-f]+\n$`).MatchString(stdout) {
			t.Errorf("-V=full: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("vettool", func(t *testing.T) {
		_, stderr, code := run(t, badDir, "go", "vet", "-vettool="+bin, "./...")
		if code == 0 || !strings.Contains(stderr, "shop.notify (called at shop.go:19:12) may do network I/O") {
			t.Errorf("go vet: exit %d, stderr:\n%s", code, stderr)
		}
		// Each finding names its rule, as the direct run does.
		for _, want := range []string{
			"shop.go:19:12: shop.notify (called at shop.go:19:12) may do network I/O",
			"shop.go:20:3: the error of shop.notify",
		} {
			line := ""
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, want) {
					line = l
				}
			}
			rule := "(txrpc)"
			if strings.Contains(want, "the error of") {
				rule = "(timeoutfail)"
			}
			if !strings.HasSuffix(line, rule) {
				t.Errorf("go vet: the finding %q does not end in %s:\n%s", want, rule, stderr)
			}
		}
		// -json keys findings by rule, as before.
		vetJSON, vetJSONErr, _ := run(t, badDir, "go", "vet", "-vettool="+bin, "-json", "./...")
		if out := vetJSON + vetJSONErr; !strings.Contains(out, `"txrpc": [`) || !strings.Contains(out, `"timeoutfail": [`) {
			t.Errorf("go vet -json: want findings keyed by rule:\n%s", out)
		}
		_, stderr, code = run(t, goodDir, "go", "vet", "-vettool="+bin, "./...")
		if code != 0 {
			t.Errorf("go vet on the clean module: exit %d, stderr:\n%s", code, stderr)
		}
		// Analyzer flags pass through go vet: configuration flags (with
		// -txrpc.netfuncs naming shop.notify, both rules report it as the
		// network call: "may do network I/O while", no chain), and the
		// rules' switches (with both off, the same run is clean). These
		// runs lint badNet (see there).
		netDir := writeModule(t, badNet)
		netfuncs := "-txrpc.netfuncs=example.com/shop/shop.notify"
		_, stderr, code = run(t, netDir, "go", "vet", "-vettool="+bin, netfuncs, "./...")
		if code == 0 || !strings.Contains(stderr, "shop.notify (called at shop.go:19:12) may do network I/O while") || !strings.Contains(stderr, "shop.go:20:3: the error of shop.notify") {
			t.Errorf("go vet -txrpc.netfuncs: exit %d, stderr:\n%s", code, stderr)
		}
		_, stderr, code = run(t, netDir, "go", "vet", "-vettool="+bin, netfuncs, "-txrpc=false", "-timeoutfail=false", "./...")
		if code != 0 {
			t.Errorf("go vet -txrpc.netfuncs -txrpc=false -timeoutfail=false: exit %d, stderr:\n%s", code, stderr)
		}
	})
}

// issue13 has one finding of each of blindupdate, checkthenact, serverkey,
// bypass and tokenorder (the service in pay, its implementation in impl);
// the check-effect-insert of Pay is tokenorder's alone.
var issue13 = map[string]string{
	"pay/pay.go": `package pay

import "context"

type Req struct{ Key string }

//idem:service
type Payments interface {
	//idem:op key=req.Key
	Charge(ctx context.Context, req Req) error
}

// NewIdempotentPayments stands for the generated wrapper.
func NewIdempotentPayments(inner Payments) Payments { return inner }
`,
	"impl/impl.go": `package impl

import (
	"context"

	"example.com/shop/pay"
)

type Service struct{}

func (*Service) Charge(ctx context.Context, req pay.Req) error { return nil }
`,
	"shop/shop.go": `package shop

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"time"

	"example.com/shop/impl"
	"example.com/shop/pay"
)

func MarkPaid(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}

func Claim(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func Post(c *http.Client, req *http.Request) {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := c.Do(req); err == nil {
			return
		}
	}
}

func Charge(ctx context.Context, s *impl.Service) error {
	return s.Charge(ctx, pay.Req{Key: "k"})
}

// Pay: check, effect, insert. tokenorder reports the effect; checkthenact
// leaves it to tokenorder.
func Pay(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		resp, err := http.Post("https://psp.example/charge", "application/json", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'SUCCESS')", key)
		return err
	}
	return err
}
`,
}

func TestEndToEndIssue13Rules(t *testing.T) {
	bin := idemlintBinary(t)
	dir := writeModule(t, issue13["shop/shop.go"])
	for name, src := range issue13 {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code := run(t, dir, bin, "./...")
	if code != 3 {
		t.Errorf("exit %d, want 3; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"shop.go:16:12: (*sql.DB).ExecContext (called at shop.go:16:12) runs \"UPDATE orders SET status = 'PAID' WHERE id = $1\", a state transition without compare-and-set",
		"shop.go:24:12: (*sql.DB).ExecContext inserts into idempotency_keys",
		"shop.go:31:3: the Idempotency-Key header is set from time.Now() at shop.go:31:55 inside a retry loop",
		"shop.go:39:9: (*impl.Service).Charge is called at shop.go:39:9 on the concrete *impl.Service, which implements the //idem:service pay.Payments",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	stdout, _, _ := run(t, dir, bin, "-json", "./...")
	var tree map[string]map[string][]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
		t.Fatalf("-json output: %v\n%s", err, stdout)
	}
	for _, rule := range []string{"blindupdate", "checkthenact", "serverkey", "bypass", "tokenorder"} {
		if n := len(tree["example.com/shop/shop"][rule]); n != 1 {
			t.Errorf("%s diagnostics = %d, want 1", rule, n)
		}
	}
	if _, stderr, code = run(t, dir, bin, "-blindupdate=false", "-checkthenact=false", "-serverkey=false", "-bypass=false", "-tokenorder=false", "./..."); code != 0 {
		t.Errorf("the four rules and tokenorder off: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := runVet(t, dir, bin); code == 0 || !strings.Contains(stderr, "skips the generated wrapper") {
		t.Errorf("go vet -vettool: exit %d, stderr:\n%s", code, stderr)
	}
}

func runVet(t *testing.T, dir, bin string) (string, int) {
	t.Helper()
	_, stderr, code := run(t, dir, "go", "vet", "-vettool="+bin, "./...")
	return stderr, code
}
