package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/runtime"
)

const resolveUsage = `usage: idemctl resolve [store flags] -scope S -op OP -key K -to success|failed|released -reason "..." [...]

Decides the outcome of one UNKNOWN record, or of a PROCESSING record whose
worker died, after a person found out what happened downstream:

  -to success   the effect happened: give the response retries get back,
                -response JSON or -response-file F (the service's response
                type, in JSON: the runtime's default codec)
  -to failed    it failed for good (or did not happen and must not be
                retried): give -message (and -code); retries get the failure
  -to released  it did not happen: the record is deleted and the next retry
                runs the effect again

By compare-and-set only: a record that is final, absent, or held by a live
lease (a worker or a reconciler is on it) is refused and nothing changes.
The reason is stored in the record's note ("resolved by hand: <reason>") and
logged to stderr as one JSON line with who, what and when; after -to
released that line is all that remains of the record.
`

type resolveConfig struct {
	store storeSpec
	r     runtime.Resolution
	json  bool
}

// codeError is a failure given by hand, with its code.
type codeError struct{ code, msg string }

func (e codeError) Error() string     { return e.msg }
func (e codeError) ErrorCode() string { return e.code }

func defaultWho() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	// The record's owner is UTF-8 text without NUL (runtime.Resolution):
	// a name or host in another encoding is written with U+FFFD.
	return strings.ToValidUTF8(strings.ReplaceAll(name+"@"+host, "\x00", ""), "\uFFFD")
}

func parseResolve(args []string, env func(string) string, stdout, stderr io.Writer) (resolveConfig, error) {
	fs := newFlagSet("resolve", resolveUsage, stderr)
	var sf storeFlags
	sf.register(fs)
	var idf idFlags
	idf.register(fs)
	to := fs.String("to", "", "the outcome: success, failed or released (required)")
	reason := fs.String("reason", "", "why, in words: what was checked downstream (required; stored and logged)")
	response := fs.String("response", "", "for success: the response retries get, as `JSON`")
	responseFile := fs.String("response-file", "", "for success: read the JSON response from `file` (- for stdin)")
	message := fs.String("message", "", "for failed: the failure message retries get (required for failed)")
	code := fs.String("code", "", "for failed: the failure's machine-readable code (optional)")
	ttl := fs.Duration("ttl", runtime.DefaultTTL, "how long the SUCCESS or FAILED record is kept: the operation's TTL")
	who := fs.String("who", "", "who resolves, for the record's owner and the log (default $USER@hostname)")
	version := fs.Int64("version", 0, "resolve only if the record is still at this version (as show printed it)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	if err := parseFlags(fs, args, stdout); err != nil {
		return resolveConfig{}, err
	}
	cfg := resolveConfig{json: *asJSON}
	var err error
	if cfg.r.ID, err = idf.identity(); err != nil {
		return resolveConfig{}, err
	}
	if *to == "" {
		return resolveConfig{}, usagef("-to is required: success, failed or released")
	}
	if cfg.r.To, err = runtime.ParseResolveTo(*to); err != nil {
		return resolveConfig{}, usagef("-to: unknown outcome %q (want success, failed or released)", *to)
	}
	if strings.TrimSpace(*reason) == "" {
		return resolveConfig{}, usagef("-reason is required: say what was checked downstream")
	}
	if len(*reason) > runtime.MaxResolveReason {
		return resolveConfig{}, usagef("-reason is %d bytes, the limit is %d", len(*reason), runtime.MaxResolveReason)
	}
	cfg.r.Reason = strings.TrimSpace(*reason)
	hasResponse := isSet(fs, "response") || isSet(fs, "response-file")
	switch cfg.r.To {
	case runtime.ResolveSuccess:
		if isSet(fs, "message") || isSet(fs, "code") {
			return resolveConfig{}, usagef("-message and -code are for -to failed")
		}
		if isSet(fs, "response") == isSet(fs, "response-file") {
			return resolveConfig{}, usagef("-to success needs exactly one of -response JSON and -response-file F")
		}
		raw := []byte(*response)
		if isSet(fs, "response-file") {
			if raw, err = readInput(*responseFile); err != nil {
				return resolveConfig{}, usagef("-response-file: %v", err)
			}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil || buf.Len() == 0 {
			return resolveConfig{}, usagef("the response is not valid JSON (the default codec's encoding): %v", jsonError(err))
		}
		cfg.r.Response = buf.Bytes()
	case runtime.ResolveFailed:
		if hasResponse {
			return resolveConfig{}, usagef("-response and -response-file are for -to success; give -message for failed")
		}
		if strings.TrimSpace(*message) == "" {
			return resolveConfig{}, usagef("-to failed needs -message: the failure retries get")
		}
		cfg.r.Failure = codeError{code: *code, msg: *message}
	case runtime.ResolveReleased:
		if hasResponse || isSet(fs, "message") || isSet(fs, "code") {
			return resolveConfig{}, usagef("-to released takes no -response, -response-file, -message or -code")
		}
	}
	if *ttl <= 0 {
		return resolveConfig{}, usagef("-ttl must be positive, got %v", *ttl)
	}
	cfg.r.TTL = *ttl
	if *version < 0 {
		return resolveConfig{}, usagef("-version must not be negative, got %d", *version)
	}
	cfg.r.Version = *version
	w := *who
	if w == "" {
		w = defaultWho()
	}
	cfg.r.Owner = "idemctl:" + w
	if len(cfg.r.Owner) > runtime.MaxKeyLen {
		return resolveConfig{}, usagef("-who is too long (%d bytes with the idemctl: prefix, the limit is %d)", len(cfg.r.Owner), runtime.MaxKeyLen)
	}
	if !utf8.ValidString(w) || strings.ContainsRune(w, 0) {
		return resolveConfig{}, usagef("-who %q is not UTF-8 text without NUL", w)
	}
	if cfg.store, err = sf.spec(fs, env); err != nil {
		return resolveConfig{}, err
	}
	return cfg, nil
}

func jsonError(err error) string {
	if err == nil {
		return "it is empty"
	}
	return err.Error()
}

func readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	}
	return os.ReadFile(name)
}

type resolveJSON struct {
	Scope       string        `json:"scope"`
	Operation   string        `json:"operation"`
	Key         string        `json:"key"`
	FromState   runtime.State `json:"from_state"`
	FromVersion int64         `json:"from_version"`
	To          string        `json:"to"`
	State       runtime.State `json:"state"`
	Version     int64         `json:"version"`
	Note        string        `json:"note"`
	Who         string        `json:"who"`
	Reason      string        `json:"reason"`
	At          time.Time     `json:"at"`
}

func runResolve(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseResolve(args, env, stdout, stderr)
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
	cfg.r.Logger = slog.New(slog.NewJSONHandler(stderr, nil)).With("tool", "idemctl")
	res, err := runtime.Resolve(ctx, store, cfg.r)
	if err != nil {
		return err
	}
	id := cfg.r.ID
	if cfg.json {
		return json.NewEncoder(stdout).Encode(resolveJSON{
			Scope: id.Scope, Operation: id.Operation, Key: id.Key, FromState: res.Before.State, FromVersion: res.Before.Version,
			To: string(cfg.r.To), State: res.State, Version: res.Version, Note: res.Note, Who: cfg.r.Owner, Reason: cfg.r.Reason,
			At: time.Now().UTC(),
		})
	}
	b := res.Before
	fmt.Fprintf(stdout, "resolved %s %q (scope %q): %s (version %d, attempts %d, takeovers %d) -> ",
		id.Operation, id.Key, id.Scope, b.State, b.Version, b.Attempts, b.Takeovers)
	if cfg.r.To == runtime.ResolveReleased {
		fmt.Fprintln(stdout, "released: the record is deleted; the next retry runs the effect again")
		return nil
	}
	fmt.Fprintf(stdout, "%s (version %d), kept %v\nnote: %s\n", res.State, res.Version, cfg.r.TTL, res.Note)
	return nil
}
