package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes a scratch module (no dependencies beyond the standard
// library) from name -> content.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeInto(t, dir, files)
	return dir
}

// The application package calls an interface inside a transaction; its
// implementations live in adapter packages it does not import.
var program = map[string]string{
	"go.mod": "module example.com/svc\n\ngo 1.26\n",
	"app/app.go": `package app

import (
	"context"
	"database/sql"
)

// Mailer sends mail (adapters/smtpmail).
type Mailer interface {
	Send(ctx context.Context, to string) error
}

// Publisher publishes events: over HTTP, or into an outbox table of the
// same transaction.
type Publisher interface {
	Publish(ctx context.Context, ev string) error
}

type Service struct {
	DB     *sql.DB
	Mail   Mailer
	Events Publisher
}

func (s *Service) Signup(ctx context.Context, email string) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO users (email) VALUES ($1)", email); err != nil {
		return err
	}
	if err := s.Mail.Send(ctx, email); err != nil {
		return err
	}
	if err := s.Events.Publish(ctx, "signup"); err != nil {
		return err
	}
	return tx.Commit()
}
`,
	"app/app_test.go": `package app

import "testing"

func TestNothing(t *testing.T) {}
`,
	"adapters/smtpmail/smtpmail.go": `package smtpmail

import (
	"context"
	"net/smtp"
)

type Mailer struct{ Addr string }

func (m *Mailer) Send(ctx context.Context, to string) error {
	return smtp.SendMail(m.Addr, nil, "noreply@example.com", []string{to}, []byte("welcome"))
}
`,
	"adapters/mailfake/fake.go": `package mailfake

import "context"

// Mailer is the tests' fake: not what production binds.
type Mailer struct{ Sent []string }

func (m *Mailer) Send(ctx context.Context, to string) error { m.Sent = append(m.Sent, to); return nil }
`,
	"adapters/events/events.go": `package events

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
)

// HTTP publishes over HTTP.
type HTTP struct{ URL string }

func (h *HTTP) Publish(ctx context.Context, ev string) error {
	resp, err := http.Post(h.URL, "text/plain", strings.NewReader(ev))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Outbox writes the event into the same database.
type Outbox struct{ DB *sql.DB }

func (o *Outbox) Publish(ctx context.Context, ev string) error {
	_, err := o.DB.ExecContext(ctx, "INSERT INTO outbox (ev) VALUES ($1)", ev)
	return err
}
`,
}

func TestWholeProgram(t *testing.T) {
	bin := idemlintBinary(t)
	dir := writeFiles(t, program)
	stdout, stderr, code := run(t, dir, bin, "-json", "./...")
	if code != 0 {
		t.Fatalf("-json: exit %d\n%s", code, stderr)
	}
	var tree map[string]map[string][]struct {
		Posn    string `json:"posn"`
		End     string `json:"end"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	diags := tree["example.com/svc/app"]["txrpc"]
	// Listed once, though app and its test variant both report it.
	if len(diags) != 1 {
		t.Fatalf("txrpc findings = %d, want 1 (the Mailer, not the Publisher with its outbox):\n%s", len(diags), stdout)
	}
	d := diags[0]
	for _, want := range []string{"(app.Mailer).Send (called at app.go:34:12)", "(*smtpmail.Mailer).Send", "smtp.SendMail", "the email may have happened"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("message lacks %q: %s", want, d.Message)
		}
	}
	if d.Posn != "app/app.go:34:12" || d.End != "app/app.go:34:35" {
		t.Errorf("posn %s end %s, want app/app.go:34:12 .. app/app.go:34:35", d.Posn, d.End)
	}
	if len(tree) != 1 {
		t.Errorf("findings in %d packages, want 1:\n%s", len(tree), stdout)
	}

	// Per package (go vet), the implementation is out of sight.
	_, stderr, code = run(t, dir, "go", "vet", "-vettool="+bin, "./...")
	if code != 0 {
		t.Errorf("go vet -vettool: exit %d, want 0 (modular drivers see less):\n%s", code, stderr)
	}
}

func TestConfigFile(t *testing.T) {
	bin := idemlintBinary(t)
	files := map[string]string{
		"go.mod":         "module example.com/shop\n\ngo 1.26\n",
		"shop/shop.go":   bad,
		".idemlint.json": `{"disable": ["txrpc"]}`,
	}
	dir := writeFiles(t, files)
	_, stderr, code := run(t, dir, bin, "./...")
	if code != 3 || strings.Contains(stderr, "transaction begun") || !strings.Contains(stderr, "the error of shop.notify") {
		t.Errorf("with disable: [txrpc]: exit %d, stderr:\n%s", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, ".idemlint.json"), []byte(`{"disabel": ["txrpc"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run(t, dir, bin, "./...")
	if code != 1 || !strings.Contains(stderr, `unknown field "disabel"`) {
		t.Errorf("misspelled key: exit %d, stderr:\n%s", code, stderr)
	}
}
