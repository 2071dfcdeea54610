package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/runtime"
)

const showUsage = `usage: idemctl show [store flags] -scope S -op OP -key K [-json]

Shows one record with everything stored: state, owner, lease, versions,
attempts, takeovers, times, note, the request and the response (decoded when
they are JSON, the runtime's default codec; else base64) and, for FAILED, the
failure's code and message.
`

// idFlags are -scope, -op and -key.
type idFlags struct{ scope, op, key string }

func (f *idFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.scope, "scope", "", "the record's `scope` (empty: the unscoped namespace)")
	fs.StringVar(&f.op, "op", "", "the record's `operation` (required)")
	fs.StringVar(&f.key, "key", "", "the record's idempotency `key` (required)")
}

func (f *idFlags) identity() (runtime.Identity, error) {
	switch {
	case f.op == "":
		return runtime.Identity{}, usagef("-op is required")
	case f.key == "":
		return runtime.Identity{}, usagef("-key is required")
	}
	id, err := runtime.NewIdentity(runtime.WithScope(context.Background(), f.scope), f.op, f.key)
	if err != nil {
		return runtime.Identity{}, usageError{err}
	}
	return id, nil
}

type showConfig struct {
	store storeSpec
	id    runtime.Identity
	json  bool
}

func parseShow(args []string, env func(string) string, stdout, stderr io.Writer) (showConfig, error) {
	fs := newFlagSet("show", showUsage, stderr)
	var sf storeFlags
	sf.register(fs)
	var idf idFlags
	idf.register(fs)
	asJSON := fs.Bool("json", false, "print the record as one JSON object")
	if err := parseFlags(fs, args, stdout); err != nil {
		return showConfig{}, err
	}
	cfg := showConfig{json: *asJSON}
	var err error
	if cfg.id, err = idf.identity(); err != nil {
		return showConfig{}, err
	}
	if cfg.store, err = sf.spec(fs, env); err != nil {
		return showConfig{}, err
	}
	return cfg, nil
}

func runShow(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseShow(args, env, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.store.timeout)
	defer cancel()
	store, closeStore, err := cfg.store.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	rec, err := store.Get(ctx, cfg.id)
	if errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("no record %s %q in scope %q: %w", cfg.id.Operation, cfg.id.Key, cfg.id.Scope, err)
	}
	if err != nil {
		return fmt.Errorf("reading the record: %w", err)
	}
	if cfg.json {
		return json.NewEncoder(stdout).Encode(toJSON(&rec))
	}
	return writeRecord(stdout, &rec)
}

func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	rel := shortDuration(now.Sub(t)) + " ago"
	if t.After(now) {
		rel = "in " + shortDuration(t.Sub(now))
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + rel + ")"
}

// writeRecord prints one record for a person.
func writeRecord(w io.Writer, r *runtime.Record) error {
	j := toJSON(r)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("scope", fmt.Sprintf("%q", r.ID.Scope))
	row("operation", cell(r.ID.Operation))
	row("key", r.ID.Key)
	row("state", string(r.State))
	row("version", fmt.Sprint(r.Version))
	row("owner", fmt.Sprintf("%q", r.Owner))
	lease := leaseText(r)
	if !r.LeaseExpiresAt.IsZero() {
		lease += " (" + r.LeaseExpiresAt.UTC().Format(time.RFC3339Nano) + ")"
	}
	row("lease", lease)
	row("attempts", fmt.Sprint(r.Attempts))
	row("takeovers", fmt.Sprint(r.Takeovers))
	row("created", stamp(r.CreatedAt, r.StoreNow))
	row("updated", stamp(r.UpdatedAt, r.StoreNow))
	row("expires", stamp(r.ExpiresAt, r.StoreNow))
	row("fingerprint", j.Fingerprint)
	row("token", cell(r.Token))
	row("note", cell(r.Note))
	if r.ResponseOmitted {
		row("response", "omitted (the effect happened; duplicates get ErrNotReplayable)")
	}
	if j.Failure != nil {
		row("failure code", cell(j.Failure.Code))
		row("failure message", cell(j.Failure.Message))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeBody(w, "request", j.Request, j.RequestBase64)
	if r.State != runtime.StateFailed || j.Failure == nil {
		writeBody(w, "response", j.Response, j.ResponseBase64)
	}
	return nil
}

func writeBody(w io.Writer, name string, js json.RawMessage, raw []byte) {
	switch {
	case js != nil:
		var buf bytes.Buffer
		_ = json.Indent(&buf, js, "  ", "  ")
		fmt.Fprintf(w, "%s (JSON):\n  %s\n", name, buf.String())
	case raw != nil:
		fmt.Fprintf(w, "%s (not JSON, base64):\n  %s\n", name, base64.StdEncoding.EncodeToString(raw))
	}
}
