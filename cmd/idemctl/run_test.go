package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// runFor runs the command line with env and returns the exit code, stdout
// and stderr.
func runFor(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), args, &stdout, &stderr, envOf(env))
	return code, stdout.String(), stderr.String()
}

// Bad input never reaches a store: every case here exits 2 with a message
// saying what is wrong (the store addresses are unreachable on purpose).
func TestUsageErrors(t *testing.T) {
	const pg = "-postgres=postgres://u@127.0.0.1:1/db"
	const rd = "-redis=redis://127.0.0.1:1"
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage: idemctl <command>"},
		{"unknown command", nil, []string{"purge"}, `unknown command "purge"`},
		{"unknown flag", nil, []string{"list", "-bogus", pg}, "flag provided but not defined: -bogus"},
		{"stray argument", nil, []string{"list", pg, "extra"}, `unexpected argument "extra"`},
		{"no store", nil, []string{"list"}, "no store: give -postgres DSN"},
		{"two store flags", nil, []string{"list", pg, rd}, "-postgres and -redis name 2 stores"},
		{"three store flags", nil, []string{"show", pg, rd, "-redis-cluster=a:1", "-op=A", "-key=k"}, "name 3 stores"},
		{"two stores in the environment", map[string]string{envPostgres: "postgres://x@y/z", envRedisCluster: "a:1"}, []string{"list"},
			"IDEM_POSTGRES_URL and IDEM_REDIS_CLUSTER_ADDRS name 2 stores"},
		{"empty store flag", nil, []string{"list", "-redis="}, "-redis is empty"},
		{"bad postgres DSN", nil, []string{"list", "-postgres=::nonsense"}, "not a PostgreSQL DSN"},
		{"bad redis URL", nil, []string{"list", "-redis=http://x"}, "not a Redis URL"},
		{"bad cluster address", nil, []string{"list", "-redis-cluster=a:1,redis://b:2"}, `want host:port,host:port,...; got "redis://b:2"`},
		{"bad cluster URL", nil, []string{"list", "-redis-cluster=redis://127.0.0.1:1?dial_timeout=soon"}, "not a Redis Cluster URL"},
		{"empty cluster address", nil, []string{"list", "-redis-cluster=a:1,,b:2"}, `got ""`},
		{"redis settings for postgres", nil, []string{"list", pg, "-redis-prefix=x:"}, "-redis-prefix and -redis-buckets are for a Redis store"},
		{"bad redis prefix", nil, []string{"list", rd, "-redis-prefix={x}"}, "must not contain '{' or '}'"},
		{"bad redis buckets", nil, []string{"list", rd, "-redis-buckets=0"}, "buckets must be 1 to 16384"},
		{"bad timeout", nil, []string{"list", rd, "-timeout=0s"}, "-timeout must be positive"},
		{"unknown state", nil, []string{"list", pg, "-state=unknown,stuck"}, `unknown state "stuck"`},
		{"empty state", nil, []string{"list", pg, "-state="}, `unknown state ""`},
		{"bad duration", nil, []string{"list", pg, "-older-than=10 minutes"}, `invalid value "10 minutes" for flag -older-than`},
		{"negative duration", nil, []string{"list", pg, "-older-than=-5m"}, "-older-than must not be negative"},
		{"negative gave-up", nil, []string{"list", pg, "-gave-up=-1"}, "-gave-up must be 0 to"},
		{"negative limit", nil, []string{"list", pg, "-limit=-1"}, "-limit must not be negative"},
		{"cursor with two parts", nil, []string{"list", pg, "-after=op/key"}, "want scope/operation/key"},
		{"cursor with four parts", nil, []string{"list", pg, "-after=a/b/c/d"}, "got 4 parts"},
		{"cursor with a bad escape", nil, []string{"list", pg, "-after=a/b%zz/c"}, "invalid URL escape"},
		{"cursor without a key", nil, []string{"list", pg, "-after=a/b/"}, "operation and key must not be empty"},
		{"show without op", nil, []string{"show", pg, "-key=k"}, "-op is required"},
		{"show without key", nil, []string{"show", pg, "-op=A"}, "-key is required"},
		{"show with a bad key", nil, []string{"show", pg, "-op=A", "-key=a b"}, "invalid idempotency key"},
		{"resolve without to", nil, []string{"resolve", pg, "-op=A", "-key=k", "-reason=r"}, "-to is required"},
		{"resolve to nowhere", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=deleted", "-reason=r"}, `-to: unknown outcome "deleted"`},
		{"resolve without reason", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released"}, "-reason is required"},
		{"resolve with a blank reason", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=  "}, "-reason is required"},
		{"resolve with a long reason", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=" + strings.Repeat("r", 1025)}, "the limit is 1024"},
		{"success without response", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r"}, "exactly one of -response JSON and -response-file"},
		{"success with both responses", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r", "-response={}", "-response-file=x"}, "exactly one of"},
		{"success with invalid JSON", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r", `-response={"id":`}, "the response is not valid JSON"},
		{"success with empty JSON", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r", "-response= "}, "not valid JSON"},
		{"success with a missing file", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r", "-response-file=/nonexistent/r.json"}, "-response-file: open /nonexistent/r.json"},
		{"success with a message", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=success", "-reason=r", "-response={}", "-message=m"}, "-message and -code are for -to failed"},
		{"failed without message", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=failed", "-reason=r", "-code=c"}, "-to failed needs -message"},
		{"failed with a response", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=failed", "-reason=r", "-message=m", "-response={}"}, "are for -to success"},
		{"released with a code", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=r", "-code=c"}, "-to released takes no"},
		{"non-positive ttl", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=r", "-ttl=0s"}, "-ttl must be positive"},
		{"negative version", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=r", "-version=-2"}, "-version must not be negative"},
		{"long who", nil, []string{"resolve", pg, "-op=A", "-key=k", "-to=released", "-reason=r", "-who=" + strings.Repeat("w", 250)}, "-who is too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runFor(t, tc.env, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 saying %q", code, stderr, tc.want)
			}
			if stdout != "" {
				t.Fatalf("stdout on a usage error: %q", stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}, {"list", "-h"}, {"show", "-help"}, {"resolve", "-h"}} {
		code, stdout, stderr := runFor(t, nil, args...)
		if code != exitOK || !strings.Contains(stdout, "usage: idemctl") || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	_, stdout, _ := runFor(t, nil, "resolve", "-h")
	for _, f := range []string{"-to", "-reason", "-response-file", "-message", "-code", "-postgres", "-redis-cluster", "-redis-buckets", "-version"} {
		if !strings.Contains(stdout, "\n  "+f+" ") && !strings.Contains(stdout, "\n  "+f+"\n") {
			t.Errorf("resolve -h does not list %s:\n%s", f, stdout)
		}
	}
}

func TestStoreChoice(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		kind    string
		target  string
		buckets int
	}{
		{"postgres flag", nil, []string{"-postgres", "postgres://a@b/c"}, "postgres", "postgres://a@b/c", 256},
		{"redis from the environment", map[string]string{envRedis: "redis://h:1/2"}, nil, "redis", "redis://h:1/2", 256},
		{"cluster from the environment", map[string]string{envRedisCluster: "a:1, b:2"}, []string{"-redis-buckets=16"}, "redis-cluster", "a:1, b:2", 16},
		{"cluster URL", nil, []string{"-redis-cluster", "redis://u:p@a:1?addr=b:2"}, "redis-cluster", "redis://u:p@a:1?addr=b:2", 256},
		{"a flag wins over the environment", map[string]string{envPostgres: "postgres://a@b/c", envRedis: "redis://h:1"},
			[]string{"-redis-cluster", "x:1"}, "redis-cluster", "x:1", 256},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, err := parseList(tc.args, envOf(tc.env), &stderr, &stderr)
			if err != nil {
				t.Fatalf("parseList: %v (%s)", err, stderr.String())
			}
			s := cfg.store
			if s.kind != tc.kind || s.target != tc.target || s.buckets != tc.buckets || s.prefix != "idem:" || s.timeout != 30*time.Second {
				t.Fatalf("store = %+v", s)
			}
			if s.kind == "redis-cluster" && tc.target == "a:1, b:2" && fmt.Sprint(s.addrs) != "[a:1 b:2]" {
				t.Fatalf("addrs = %q", s.addrs)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	env := envOf(map[string]string{envRedis: "redis://h:1"})
	var stderr bytes.Buffer
	cfg, err := parseList(nil, env, &stderr, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.params; fmt.Sprint(p.States) != "[UNKNOWN PROCESSING]" || p.Scope != nil || p.Operation != "" || p.MinAttempts != 0 ||
		p.OlderThan != 0 || p.LeaseFree || p.After != nil || cfg.limit != 1000 || cfg.json {
		t.Fatalf("defaults = %+v, limit %d", p, cfg.limit)
	}
	cfg, err = parseList([]string{"-state", " Unknown,FAILED,unknown", "-scope", "", "-op", "Payments.Charge", "-older-than", "90m",
		"-gave-up", "20", "-stuck", "-limit", "0", "-after", "t%2F1/Payments.Charge/k%2F2", "-json"}, env, &stderr, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.params
	if fmt.Sprint(p.States) != "[UNKNOWN FAILED]" || p.Scope == nil || *p.Scope != "" || p.Operation != "Payments.Charge" ||
		p.OlderThan != 90*time.Minute || p.MinAttempts != 20 || !p.LeaseFree || cfg.limit != 0 || !cfg.json {
		t.Fatalf("params = %+v", p)
	}
	if want := (runtime.Identity{Scope: "t/1", Operation: "Payments.Charge", Key: "k/2"}); p.After == nil || *p.After != want {
		t.Fatalf("after = %+v, want %+v", p.After, want)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	for _, id := range []runtime.Identity{
		{Scope: "", Operation: "A", Key: "k"},
		{Scope: "tenant/1 %x", Operation: "Svc/Op", Key: "a/b%2F?#"},
		{Scope: "ünï", Operation: "O p", Key: "~!"},
	} {
		got, err := parseCursor(formatCursor(id))
		if err != nil || got != id {
			t.Errorf("cursor %q: %+v, %v; want %+v", formatCursor(id), got, err, id)
		}
	}
}

func TestParseResolve(t *testing.T) {
	env := envOf(map[string]string{envPostgres: "postgres://a@b/c"})
	var stderr bytes.Buffer
	dir := t.TempDir()
	file := filepath.Join(dir, "resp.json")
	if err := os.WriteFile(file, []byte("{\n  \"charge_id\": \"ch_1\",\n  \"amount\": 42\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseResolve([]string{"-scope=t", "-op=Payments.Charge", "-key=k", "-to=SUCCESS", "-reason", "  found ch_1 ", "-response-file", file,
		"-ttl=1h", "-who=alice", "-version=7"}, env, &stderr, &stderr)
	if err != nil {
		t.Fatal(err, stderr.String())
	}
	r := cfg.r
	if r.ID != (runtime.Identity{Scope: "t", Operation: "Payments.Charge", Key: "k"}) || r.To != runtime.ResolveSuccess || r.Reason != "found ch_1" ||
		string(r.Response) != `{"charge_id":"ch_1","amount":42}` || r.TTL != time.Hour || r.Owner != "idemctl:alice" || r.Version != 7 || r.Failure != nil {
		t.Fatalf("resolution = %+v", r)
	}
	cfg, err = parseResolve([]string{"-op=A", "-key=k", "-to=failed", "-reason=r", "-message=declined", "-code=card_declined"}, env, &stderr, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if f := runtime.EncodeFailure(cfg.r.Failure); string(f) != `{"code":"card_declined","message":"declined"}` || cfg.r.TTL != runtime.DefaultTTL ||
		!strings.HasPrefix(cfg.r.Owner, "idemctl:") || !strings.Contains(cfg.r.Owner, "@") {
		t.Fatalf("failure %s, resolution %+v", f, cfg.r)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0ms", 250 * time.Millisecond: "250ms", 42 * time.Second: "42s", 3*time.Minute + 12*time.Second: "3m12s",
		5*time.Hour + 3*time.Minute: "5h03m", 100 * time.Hour: "4d4h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestLeaseText(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		rec  runtime.Record
		want string
	}{
		{runtime.Record{State: runtime.StateUnknown, StoreNow: now}, "free"},
		{runtime.Record{State: runtime.StateUnknown, Owner: "rec", LeaseExpiresAt: now.Add(12 * time.Second), StoreNow: now}, "held 12s"},
		{runtime.Record{State: runtime.StateUnknown, LeaseExpiresAt: now.Add(5 * time.Minute), StoreNow: now}, "held-off 5m00s"},
		{runtime.Record{State: runtime.StateProcessing, Owner: "w", LeaseExpiresAt: now.Add(-3 * time.Minute), StoreNow: now}, "expired 3m00s ago"},
	}
	for _, tc := range tests {
		if got := leaseText(&tc.rec); got != tc.want {
			t.Errorf("leaseText(%+v) = %q, want %q", tc.rec, got, tc.want)
		}
	}
}

func TestListAllPages(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	for i := range 250 {
		id := runtime.Identity{Scope: "s", Operation: "Op", Key: fmt.Sprintf("k%03d", i)}
		if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte{1}, Owner: "w", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	all, more, err := listAll(ctx, s, runtime.ListParams{}, 0)
	if err != nil || more || len(all) != 250 || all[0].ID.Key != "k000" || all[249].ID.Key != "k249" {
		t.Fatalf("all: %d records, more %v, %v", len(all), more, err)
	}
	exact, more, err := listAll(ctx, s, runtime.ListParams{}, 250)
	if err != nil || more || len(exact) != 250 {
		t.Fatalf("limit 250: %d records, more %v, %v", len(exact), more, err)
	}
	first, more, err := listAll(ctx, s, runtime.ListParams{}, 120)
	if err != nil || !more || len(first) != 120 || first[119].ID.Key != "k119" {
		t.Fatalf("limit 120: %d records, more %v, %v", len(first), more, err)
	}
	after, err := parseCursor(formatCursor(first[119].ID))
	if err != nil {
		t.Fatal(err)
	}
	rest, more, err := listAll(ctx, s, runtime.ListParams{After: &after}, 0)
	if err != nil || more || len(rest) != 130 || rest[0].ID.Key != "k120" {
		t.Fatalf("rest: %d records, more %v, %v", len(rest), more, err)
	}
}
