// Package redisstore is a Redis [runtime.Store] on go-redis/v9. It takes a
// [redis.UniversalClient], so the same store works on a single server,
// Sentinel and Redis Cluster.
//
// Every state change is one Lua script, run by SHA (EVALSHA, falling back to
// EVAL when the server does not know the script yet), so Redis applies it
// atomically and no get-then-set ever spans two round trips. Leases and expiry
// are decided with Redis's clock (TIME inside the script), never the
// application's; [runtime.Record.StoreNow] is that clock at the read.
//
// # Key layout
//
// Records are spread over a fixed number of buckets (default 256, see
// [WithBuckets]); the bucket of a record is a hash of its identity. With the
// default prefix "idem:", bucket b holds
//
//	idem:{b}:r:<scope>:<operation>:<key>   hash: one record
//	idem:{b}:pending                       sorted set: PROCESSING and UNKNOWN records by lease expiry
//	idem:{b}:expiry                        sorted set: SUCCESS and FAILED records by ExpiresAt
//	idem:{b}:version                       counter: the bucket's last version (never expires)
//	idem:{b}:acq:<nonce>                   hash: one acquire call's receipt (expires with its lease)
//	idem:{b}:rel:<nonce>                   string: one release call's receipt (expires after a minute)
//
// The hash tag {b} puts a record and both indexes of its bucket in one
// Cluster slot, so every script touches one slot. While resharding splits a
// slot's keys between two nodes, no script drops an index entry whose record
// is on the other node (see docs/redisstore.md). Scope, operation and key
// are escaped (%XX for '%', ':', '{', '}', '|', '\\' and bytes outside
// visible ASCII), so no identity can be spelled as another one.
//
// # TTL
//
// A finished (SUCCESS or FAILED) record has ExpiresAt = store now + TTL and
// a Redis expiry (PEXPIRE) of TTL + grace ([WithExpiryGrace], default 1m):
// Redis deletes it by itself, and between ExpiresAt and the deletion a
// claim treats it as absent (replacing it with a higher version) and
// [Store.Sweep] may delete it. Sweep is therefore optional: it only frees
// memory up to grace earlier and drops index entries of records Redis
// already deleted. PROCESSING and UNKNOWN records never carry a Redis expiry
// (PERSIST) and are never swept.
//
// # Round trips
//
// The happy path of [runtime.Do] is two scripts (claim, complete); a replay
// is one round trip. A claim that finds a record the claim script would
// leave alone (a replay, a duplicate in flight, a key reused with another
// request) needs no script: the store reads the record and Redis's clock in
// one pipeline (HGETALL, then TIME, on the node that holds the record) and
// answers from them, deciding leases and expiry with that clock exactly as
// the script would. Anything else (no record, an expired lease or TTL, a
// record to acquire) goes to the claim script, which decides again
// atomically. Which of the read and the script comes first is a guess from
// the store's recent claims (see internal/claimorder): a first call runs the
// script at once, a replay reads; a wrong guess costs one more round trip,
// never a wrong answer. The read needs a client that talks to one node per
// key: a *redis.Client (standalone, Sentinel) or a *redis.ClusterClient
// (the read goes through the master's node client, so hooks registered
// with OnNewNode see it); with any other client every claim runs the
// script. [Store.AcquirePending]
// and [Store.Sweep] pipeline one small counting script over every bucket
// (one round trip per master, in parallel on Cluster) and then run their
// script on the buckets that have due entries only.
//
// # Failures
//
// Redis errors come back wrapped as "redisstore: <operation>: <cause>", and
// the runtime fails closed on them. go-redis resends a command whose
// connection broke without knowing whether Redis ran it; claim and
// transition carry a per-call nonce so that a resent script reports what
// its first run did instead of a foreign live lease or [runtime.ErrLeaseLost].
// Records survive a restart only as far as Redis persists them: run it with
// an append-only file and maxmemory-policy noeviction.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/claimorder"
	"github.com/idemkit/idem/runtime"
)

// Defaults of the options.
const (
	DefaultPrefix         = "idem:"
	DefaultBuckets        = 256
	DefaultExpiryGrace    = time.Minute
	DefaultMaxRecordBytes = 1 << 20
)

// Limits of one AcquirePending or Sweep call when the caller gives none,
// and how many index entries one bucket script inspects at most.
const (
	defaultAcquireLimit = 100
	defaultSweepLimit   = 1000
	inspectBudget       = 2000
	// maxAcquireRuns bounds the runs of the acquire script in one bucket
	// per AcquirePending call (2 million inspected entries): the runs end
	// by themselves (each inspected entry is skipped or leaves the due
	// entries), and this keeps a call finite should they not.
	maxAcquireRuns = 1000
)

// Store is a [runtime.Store] on Redis. It is safe for concurrent use.
type Store struct {
	c        redis.UniversalClient
	prefix   string
	buckets  int
	grace    time.Duration
	maxBytes int

	noncePrefix string
	nonce       atomic.Uint64
	tags        []bucketKeys // per bucket, built once
	order       claimorder.Guess
}

// bucketKeys are the key prefix of a bucket's records, its index keys and
// its version counter.
type bucketKeys struct{ rec, pending, expiry, ver string }

// Option configures a [Store].
type Option func(*Store) error

// WithPrefix sets the prefix of every key (default "idem:"). It must not
// contain '{' or '}', which would change the hash tag.
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", prefix)
		}
		s.prefix = prefix
		return nil
	}
}

// WithBuckets sets the number of buckets records are spread over (default
// 256, at most 16384). Every process sharing the records must use the same
// number: records written with another count are not found.
func WithBuckets(n int) Option {
	return func(s *Store) error {
		if n < 1 || n > 16384 {
			return fmt.Errorf("redisstore: buckets must be 1 to 16384, got %d", n)
		}
		s.buckets = n
		return nil
	}
}

// WithExpiryGrace sets how long after its ExpiresAt Redis itself deletes a
// finished record (default 1m). Until then a claim of the same identity
// replaces it with a higher version, as a store that sweeps would.
func WithExpiryGrace(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("redisstore: expiry grace must not be negative, got %v", d)
		}
		s.grace = d
		return nil
	}
}

// WithMaxRecordBytes limits the size of a stored request or response; larger
// ones are refused with [runtime.ErrTooLarge] (default 1 MiB).
func WithMaxRecordBytes(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("redisstore: max record bytes must be positive, got %d", n)
		}
		s.maxBytes = n
		return nil
	}
}

// New returns a store on client. The client may be a *redis.Client, a
// *redis.ClusterClient or a failover client; the store never closes it.
// Build it with ContextTimeoutEnabled set in its options: go-redis
// otherwise ignores context deadlines (each command waits its ReadTimeout
// and is retried), and neither the runtime's completion timeout nor a
// caller's deadline bounds a call while Redis takes no writes.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{c: client, prefix: DefaultPrefix, buckets: DefaultBuckets, grace: DefaultExpiryGrace, maxBytes: DefaultMaxRecordBytes}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	s.noncePrefix = hex.EncodeToString(b[:]) + "-"
	s.tags = make([]bucketKeys, s.buckets)
	for i := range s.tags {
		tag := s.bucketTag(i)
		s.tags[i] = bucketKeys{rec: tag + "r:", pending: tag + "pending", expiry: tag + "expiry", ver: tag + "version"}
	}
	return s, nil
}

var _ runtime.Store = (*Store)(nil)

// LoadScripts loads the store's scripts on every server (on Cluster, every
// master) ahead of the first call. It is optional: a script the server does
// not know is sent once with EVAL, which also caches it.
func (s *Store) LoadScripts(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return fmt.Errorf("redisstore: loading scripts: %w", err)
		}
	}
	return nil
}

// keys are the Redis keys of one record.
type keys struct{ rec, pending, expiry, ver string }

func (s *Store) bucketTag(b int) string {
	return s.prefix + "{" + strconv.Itoa(b) + "}:"
}

func (s *Store) keysOf(id runtime.Identity) keys {
	var e strings.Builder
	e.Grow(len(id.Scope) + len(id.Operation) + len(id.Key) + 2)
	escape(&e, id.Scope)
	e.WriteByte(':')
	escape(&e, id.Operation)
	e.WriteByte(':')
	escape(&e, id.Key)
	name := e.String()
	// FNV-1a, 32 bits, of the escaped name.
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	bk := &s.tags[h%uint32(s.buckets)]
	return keys{rec: bk.rec + name, pending: bk.pending, expiry: bk.expiry, ver: bk.ver}
}

const hexDigits = "0123456789ABCDEF"

// escape writes v with '%', the separator ':', the hash-tag braces, '|',
// '\\' and every byte outside visible ASCII as %XX: the escaped components
// never contain ':', so the joined name is unambiguous.
func escape(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c <= ' ' || c >= 0x7f, c == '%', c == ':', c == '{', c == '}', c == '|', c == '\\':
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		default:
			b.WriteByte(c)
		}
	}
}

func (s *Store) newNonce() string {
	var b [64]byte
	return string(strconv.AppendUint(append(b[:0], s.noncePrefix...), s.nonce.Add(1), 36))
}

func (s *Store) checkSize(what string, b []byte) error {
	if len(b) > s.maxBytes {
		return fmt.Errorf("%w: redisstore: %s is %d bytes, the limit is %d (see WithMaxRecordBytes)", runtime.ErrTooLarge, what, len(b), s.maxBytes)
	}
	return nil
}

func us(d time.Duration) int64 { return d.Microseconds() }

// Claim implements [runtime.Store]: one script, or one read for a record
// the script would leave alone.
func (s *Store) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	return s.claim(ctx, p, "")
}

// claim claims by a read of the record or by the claim script, in the
// order the store guesses (see the package documentation, Round trips).
//
// The nonce names this call ("": a new one, drawn when the script runs):
// when the client resends the script (go-redis retries a command whose
// connection broke, not knowing whether Redis ran it), the script
// recognizes the claim it made and reports it as claimed instead of as a
// live record held by another.
func (s *Store) claim(ctx context.Context, p runtime.ClaimParams, nonce string) (runtime.ClaimResult, error) {
	if err := s.checkSize("request", p.Request); err != nil {
		return runtime.ClaimResult{}, err
	}
	k := s.keysOf(p.ID)
	if s.order.ReadFirst() {
		res, answered, err := s.claimByRead(ctx, k.rec, p, nonce)
		if err != nil {
			return runtime.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
		}
		if answered {
			s.order.Found()
			return res, nil
		}
	}
	res, err := s.runClaim(ctx, k, p, nonce)
	if err != nil {
		return runtime.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	if res.Claimed {
		s.order.Created()
	} else {
		s.order.Found()
	}
	return res, nil
}

// claimByRead answers a claim from one read of the record and the store's
// clock when the claim script, run at that moment, would have written
// nothing and returned the record unclaimed. It reports answered false when
// the script must decide: no record, one it may create or take over by
// that clock, one carrying this call's nonce, or a read that failed for a
// reason other than the caller's context (a slot that moved, a client that
// cannot read from one node): the script then runs with go-redis's own
// routing and retries.
func (s *Store) claimByRead(ctx context.Context, key string, p runtime.ClaimParams, nonce string) (runtime.ClaimResult, bool, error) {
	f, now, err := s.read(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return runtime.ClaimResult{}, false, err
		}
		return runtime.ClaimResult{}, false, nil
	}
	if takeable(f, p, nonce, now.UnixMicro()) {
		return runtime.ClaimResult{}, false, nil
	}
	rec, err := recordOf(f, now, p.ID)
	if err != nil {
		return runtime.ClaimResult{}, false, err
	}
	return runtime.ClaimResult{Record: rec}, true, nil
}

// takeable mirrors the claim script's choice for the record with fields f
// at store time now (microseconds): true when the script would create it
// (absent, or finished past its ExpiresAt), take it over (PROCESSING with
// an expired lease and the same fingerprint), acquire it (UNKNOWN with a
// free lease, the same fingerprint and AcquireUnknown), or recognize this
// call's own claim by its nonce (Claim draws its nonce only when it runs
// the script; before that it has none, which matches nothing). Every false
// answer holds at the moment of the read too: the read comes before the
// clock, so a lease or TTL live at now was live when the record was read.
func takeable(f map[string]string, p runtime.ClaimParams, nonce string, now int64) bool {
	st, ok := f["st"]
	if !ok {
		return true
	}
	if p.IfVersion != 0 && f["v"] != strconv.FormatInt(p.IfVersion, 10) {
		// Not at the version the caller decided on (ClaimParams.IfVersion).
		return nonce != "" && f["cn"] == nonce && f["ow"] == p.Owner
	}
	le, _ := strconv.ParseInt(f["le"], 10, 64)
	ex, _ := strconv.ParseInt(f["ex"], 10, 64)
	sameFP := f["fp"] == string(p.Fingerprint)
	switch runtime.State(st) {
	case runtime.StateSuccess, runtime.StateFailed:
		return ex > 0 && ex <= now
	case runtime.StateProcessing:
		if le > 0 && le <= now && sameFP {
			return true
		}
	case runtime.StateUnknown:
		if p.AcquireUnknown && le <= now && sameFP {
			return true
		}
	default:
		return false
	}
	return nonce != "" && f["cn"] == nonce && f["ow"] == p.Owner
}

// runClaim runs the claim script with nonce, or a new one when it is "".
func (s *Store) runClaim(ctx context.Context, k keys, p runtime.ClaimParams, nonce string) (runtime.ClaimResult, error) {
	if nonce == "" {
		nonce = s.newNonce()
	}
	acq := "0"
	if p.AcquireUnknown {
		acq = "1"
	}
	vals, err := claimScript.Run(ctx, s.c, []string{k.rec, k.pending, k.expiry, k.ver},
		p.Fingerprint, p.Owner, us(p.Lease), p.Request, acq, p.ID.Scope, p.ID.Operation, p.ID.Key, nonce, us(s.grace),
		strconv.FormatInt(p.IfVersion, 10)).Slice()
	if err != nil {
		return runtime.ClaimResult{}, err
	}
	if len(vals) < 2 {
		return runtime.ClaimResult{}, fmt.Errorf("unexpected reply of %d values", len(vals))
	}
	now, err := timeVal(vals[1])
	if err != nil {
		return runtime.ClaimResult{}, err
	}
	rec, err := parseRecord(vals[2:], now)
	if err != nil {
		return runtime.ClaimResult{}, err
	}
	return runtime.ClaimResult{Claimed: intVal(vals[0]) == 1, Record: rec}, nil
}

// read reads the record at key and then Redis's clock, in one pipeline on
// the node that holds the key. It fails with errNoNode when the client is
// neither a *redis.Client nor a *redis.ClusterClient. On Cluster the node
// is the master of the key's slot as the client last learned it; a slot
// that moved since answers MOVED or ASK, an error like any other.
func (s *Store) read(ctx context.Context, key string) (map[string]string, time.Time, error) {
	var node *redis.Client
	switch c := s.c.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, time.Time{}, err
		}
		node = n
	default:
		return nil, time.Time{}, errNoNode
	}
	pipe := node.Pipeline()
	rec := pipe.HGetAll(ctx, key)
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, time.Time{}, err
	}
	return rec.Val(), now.Val(), nil
}

var errNoNode = errors.New("the client cannot send a pipeline to the node of one key")

// recordOf decodes a record read with HGETALL and checks that it is the
// record of id (the key names the identity; another one means a reply out
// of step with its command).
func recordOf(f map[string]string, now time.Time, id runtime.Identity) (runtime.Record, error) {
	rec, err := parseFields(func(i int) string { return f[recordFields[i]] }, now)
	if err != nil {
		return runtime.Record{}, err
	}
	if rec.ID != id {
		return runtime.Record{}, fmt.Errorf("read %s %q: the server answered with the record of %s %q (scope %q)",
			id.Operation, id.Key, rec.ID.Operation, rec.ID.Key, rec.ID.Scope)
	}
	return rec, nil
}

// Get implements [runtime.Store] with the claim's read (see the package
// documentation, Round trips), or the get script when the read fails for
// another reason than the caller's context.
func (s *Store) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	key := s.keysOf(id).rec
	f, now, err := s.read(ctx, key)
	if err == nil {
		if len(f) == 0 {
			return runtime.Record{}, runtime.ErrNotFound
		}
		rec, err := recordOf(f, now, id)
		if err != nil {
			return runtime.Record{}, fmt.Errorf("redisstore: get: %w", err)
		}
		return rec, nil
	}
	if ctx.Err() != nil {
		return runtime.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	vals, err := getScript.Run(ctx, s.c, []string{key}).Slice()
	if err != nil {
		return runtime.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if len(vals) < 2 {
		return runtime.Record{}, fmt.Errorf("redisstore: get: unexpected reply of %d values", len(vals))
	}
	if intVal(vals[0]) != 1 {
		return runtime.Record{}, runtime.ErrNotFound
	}
	now, err = timeVal(vals[1])
	if err != nil {
		return runtime.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	rec, err := parseRecord(vals[2:], now)
	if err != nil {
		return runtime.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	return rec, nil
}

// Transition implements [runtime.Store] in one script.
func (s *Store) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	return s.transition(ctx, p, s.newNonce())
}

// transition runs the transition script; a resent script with the same
// token (the runtime's, or else the nonce) reports the transition it applied
// instead of ErrLeaseLost.
func (s *Store) transition(ctx context.Context, p runtime.TransitionParams, nonce string) (int64, error) {
	if err := s.checkSize("response", p.Response); err != nil {
		return 0, err
	}
	k := s.keysOf(p.ID)
	has := "0"
	if p.Response != nil {
		has = "1"
	}
	token := p.Token
	if token == "" {
		token = nonce
	}
	omitted := "0"
	if p.ResponseOmitted {
		omitted = "1"
	}
	vals, err := transitionScript.Run(ctx, s.c, []string{k.rec, k.pending, k.expiry, k.ver},
		string(p.From), p.Owner, p.Version, string(p.To), p.NewOwner, us(p.Lease), us(p.TTL),
		p.Response, has, s.grace.Milliseconds(), token, p.Note, omitted).Slice()
	if err != nil {
		return 0, fmt.Errorf("redisstore: transition to %s: %w", p.To, err)
	}
	if len(vals) == 0 || intVal(vals[0]) != 1 {
		return 0, runtime.ErrLeaseLost
	}
	if len(vals) < 2 {
		return 0, fmt.Errorf("redisstore: transition to %s: unexpected reply of %d values", p.To, len(vals))
	}
	return intVal(vals[1]), nil
}

// Renew implements [runtime.Store] in one script.
func (s *Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	k := s.keysOf(p.ID)
	vals, err := renewScript.Run(ctx, s.c, []string{k.rec, k.pending, k.expiry},
		string(p.State), p.Owner, p.Version, us(p.Lease)).Slice()
	if err != nil {
		return time.Time{}, fmt.Errorf("redisstore: renew: %w", err)
	}
	if len(vals) == 0 || intVal(vals[0]) != 1 {
		return time.Time{}, runtime.ErrLeaseLost
	}
	if len(vals) < 2 {
		return time.Time{}, fmt.Errorf("redisstore: renew: unexpected reply of %d values", len(vals))
	}
	until, err := timeVal(vals[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("redisstore: renew: %w", err)
	}
	return until, nil
}

// Release implements [runtime.Store] in one script. Each call carries a
// nonce, so that a resent script (go-redis resends a command whose reply it
// did not get) reports its own first run's deletion instead of a lost lease.
func (s *Store) Release(ctx context.Context, p runtime.ReleaseParams) error {
	return s.release(ctx, p, s.newNonce())
}

// releaseReceipt is how long a release's receipt lives (see releaseScript):
// far longer than go-redis takes to resend a command.
const releaseReceipt = time.Minute

func (s *Store) release(ctx context.Context, p runtime.ReleaseParams, nonce string) error {
	k := s.keysOf(p.ID)
	n, err := releaseScript.Run(ctx, s.c, []string{k.rec, k.pending, k.expiry, receiptKey(k.pending, "rel:", nonce)},
		string(p.State), p.Owner, p.Version, nonce, releaseReceipt.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if n != 1 {
		return runtime.ErrLeaseLost
	}
	return nil
}

// AcquirePending implements [runtime.Store]. It pipelines a count of due
// entries over every bucket's pending index (one round trip per master),
// then runs the acquire script on the buckets with due entries, starting at
// a random bucket, until Limit records are acquired (default 100 when Limit
// is not positive). Each bucket's script is atomic, so two callers never
// acquire the same record; within a bucket records come oldest lease first,
// across buckets there is no global order.
//
// One run of a bucket's script inspects at most 2000 index entries; entries
// it skips (records at or above MaxAttempts, records of other operations)
// stay where they are, and the next run starts after them, until the limit
// is reached or the bucket's due entries end: up to 2 million skipped
// entries (1000 runs) in a bucket ahead of a due record, the call reaches
// it; past that it stops in that bucket, and the next call starts over from
// the bucket's oldest entry.
//
// Each run of a script carries a nonce, so that a resent script (go-redis
// resends a command whose reply it did not get) answers with the records its
// first run acquired instead of acquiring others.
func (s *Store) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	return s.acquirePending(ctx, p, func(int, int) string { return s.newNonce() })
}

// acquirePending is AcquirePending with the nonce of each run of a bucket's
// script given by nonce (the bucket, and the run's number in it from 0).
func (s *Store) acquirePending(ctx context.Context, p runtime.AcquireParams, nonce func(bucket, run int) string) ([]runtime.Record, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultAcquireLimit
	}
	due, err := s.dueBuckets(ctx, "pending")
	if err != nil {
		return nil, fmt.Errorf("redisstore: acquire pending: %w", err)
	}
	ops := make([]any, len(p.Operations))
	for i, op := range p.Operations {
		ops[i] = op
	}
	var out []runtime.Record
	for _, b := range due {
		for run, start := 0, int64(0); len(out) < limit && start >= 0 && run < maxAcquireRuns; run++ {
			n := nonce(b, run)
			args := append([]any{p.Owner, us(p.Lease), limit - len(out), p.MaxAttempts, inspectBudget, n, start}, ops...)
			vals, err := acquireScript.Run(ctx, s.c, []string{s.tags[b].pending, s.tags[b].ver, receiptKey(s.tags[b].pending, "acq:", n)}, args...).Slice()
			if notNow(err) {
				break // the bucket's slot is migrating: its records wait for the next call
			}
			if err != nil {
				// Records acquired before are held by p.Owner now: return
				// them with the error so that they are not stranded.
				return out, fmt.Errorf("redisstore: acquire pending: %w", err)
			}
			if len(vals) < 2 || (len(vals)-2)%nFields != 0 {
				return out, fmt.Errorf("redisstore: acquire pending: unexpected reply of %d values", len(vals))
			}
			now, err := timeVal(vals[0])
			if err != nil {
				return out, fmt.Errorf("redisstore: acquire pending: %w", err)
			}
			// Where the next run starts: -1 when this one reached the end
			// of the due entries (or the limit). Each inspected entry is
			// either skipped (the start moves past it) or leaves the due
			// entries, so the runs end.
			from := start
			next, ok := vals[1].(string)
			if start, err = strconv.ParseInt(next, 10, 64); !ok || err != nil || start != -1 && start < from {
				return out, fmt.Errorf("redisstore: acquire pending: unexpected place to go on from: %v", vals[1])
			}
			for i := 2; i < len(vals); i += nFields {
				rec, err := parseRecord(vals[i:i+nFields], now)
				if err != nil {
					return out, fmt.Errorf("redisstore: acquire pending: %w", err)
				}
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// Sweep implements [runtime.Store]: it deletes up to limit (default 1000)
// finished records whose ExpiresAt passed, by the expiry indexes of the
// buckets, and drops index entries of records Redis already expired (those
// are not counted). Redis deletes finished records by itself grace after
// ExpiresAt, so running Sweep is optional.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = defaultSweepLimit
	}
	due, err := s.dueBuckets(ctx, "expiry")
	if err != nil {
		return 0, fmt.Errorf("redisstore: sweep: %w", err)
	}
	n := 0
	for _, b := range due {
		if n >= limit {
			break
		}
		m, err := sweepScript.Run(ctx, s.c, []string{s.tags[b].expiry}, limit-n, inspectBudget).Int()
		if notNow(err) {
			continue // the bucket's slot is migrating
		}
		if err != nil {
			return n, fmt.Errorf("redisstore: sweep: %w", err)
		}
		n += m
	}
	return n, nil
}

// dueBuckets returns the buckets whose index (pending or expiry) has entries
// due by the store's clock, in an order starting at a random bucket so that
// concurrent callers spread.
func (s *Store) dueBuckets(ctx context.Context, index string) ([]int, error) {
	cmds, err := s.countDue(ctx, index, false)
	if err != nil && isNoScript(err) {
		cmds, err = s.countDue(ctx, index, true)
	}
	if err != nil {
		return nil, err
	}
	start := mrand.IntN(s.buckets)
	var due []int
	for i := range s.buckets {
		b := (start + i) % s.buckets
		if n, _ := cmds[b].Int64(); n > 0 {
			due = append(due, b)
		}
	}
	return due, nil
}

func (s *Store) countDue(ctx context.Context, index string, eval bool) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, s.buckets)
	_, err := s.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for b := range s.buckets {
			k := []string{s.tags[b].pending}
			if index == "expiry" {
				k[0] = s.tags[b].expiry
			}
			if eval {
				cmds[b] = dueScript.Eval(ctx, pipe, k)
			} else {
				cmds[b] = dueScript.EvalSha(ctx, pipe, k)
			}
		}
		return nil
	})
	return cmds, err
}

// receiptKey returns the key of a script's receipt: the bucket's prefix
// (its pending index's key less "pending"), kind and the call's nonce.
func receiptKey(pending, kind, nonce string) string {
	return strings.TrimSuffix(pending, "pending") + kind + nonce
}

// notNow reports whether err is Redis Cluster's TRYAGAIN: the keys a script
// declares are split between two nodes while their slot migrates (go-redis
// already retried). The script did not run; a reconciler or sweeper
// call skips the bucket and gets it on a later call.
func notNow(err error) bool { return err != nil && redis.IsTryAgainError(err) }

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// nFields is the number of record fields in a reply (prelude's F).
const nFields = 18

// parseRecord decodes the fields sc, op, ky, fp, st, ow, v, le, ex, rq, rs,
// to, at, ca, ua, tn, nt, om.
func parseRecord(v []any, now time.Time) (runtime.Record, error) {
	if len(v) < nFields {
		return runtime.Record{}, fmt.Errorf("record reply has %d fields, want %d", len(v), nFields)
	}
	return parseFields(func(i int) string { s, _ := v[i].(string); return s }, now)
}

// parseFields decodes a record whose field i (in the order of recordFields)
// is str(i), "" when absent.
func parseFields(str func(int) string, now time.Time) (runtime.Record, error) {
	bytesOf := func(i int) []byte {
		if s := str(i); s != "" {
			return []byte(s)
		}
		return nil
	}
	r := runtime.Record{
		ID:          runtime.Identity{Scope: str(0), Operation: str(1), Key: str(2)},
		Fingerprint: bytesOf(3),
		State:       runtime.State(str(4)),
		Owner:       str(5),
		Request:     bytesOf(9),
		Response:    bytesOf(10),
		Token:       str(15),
		Note:        str(16),
		StoreNow:    now,
	}
	r.ResponseOmitted = str(17) == "1"
	if !r.State.Valid() {
		return runtime.Record{}, fmt.Errorf("record %q/%q/%q has invalid state %q", r.ID.Scope, r.ID.Operation, r.ID.Key, r.State)
	}
	var err error
	num := func(i int) int64 {
		n, perr := strconv.ParseInt(str(i), 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("record %q/%q/%q: field %d: %w", r.ID.Scope, r.ID.Operation, r.ID.Key, i, perr)
		}
		return n
	}
	r.Version = num(6)
	r.LeaseExpiresAt = microTime(num(7))
	r.ExpiresAt = microTime(num(8))
	r.Takeovers = int32(num(11))
	r.Attempts = int32(num(12))
	r.CreatedAt = microTime(num(13))
	r.UpdatedAt = microTime(num(14))
	return r, err
}

func microTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n)
}

func timeVal(v any) (time.Time, error) {
	switch x := v.(type) {
	case int64:
		return microTime(x), nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("bad time %q: %w", x, err)
		}
		return microTime(n), nil
	}
	return time.Time{}, fmt.Errorf("bad time %v (%T)", v, v)
}

func intVal(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// List implements [runtime.Lister]. It reads every bucket's indexes (the
// pending index for PROCESSING and UNKNOWN records, the expiry index for
// finished ones) and then the records they name, in pipelines: a scan of
// the whole store, meant for operators, not for request paths.
func (s *Store) List(ctx context.Context, p runtime.ListParams) ([]runtime.Record, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	pending, finished := false, false
	for _, st := range p.ListStates() {
		pending = pending || st == runtime.StateProcessing || st == runtime.StateUnknown
		finished = finished || st.Final()
	}
	idx := make([]*redis.StringSliceCmd, 0, 2*s.buckets)
	if _, err := s.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, b := range s.tags {
			if pending {
				idx = append(idx, pipe.ZRange(ctx, b.pending, 0, -1))
			}
			if finished {
				idx = append(idx, pipe.ZRange(ctx, b.expiry, 0, -1))
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("redisstore: list: reading indexes: %w", err)
	}
	now, err := s.c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: list: %w", err)
	}
	var names []string
	for _, c := range idx {
		names = append(names, c.Val()...)
	}
	reads := make([]*redis.SliceCmd, len(names))
	if len(names) > 0 {
		if _, err := s.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, k := range names {
				reads[i] = pipe.HMGet(ctx, k, recordFields...)
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redisstore: list: reading records: %w", err)
		}
	}
	now = now.Truncate(time.Microsecond)
	seen := make(map[runtime.Identity]bool)
	var out []runtime.Record
	for _, c := range reads {
		vals := c.Val()
		if len(vals) < nFields || vals[4] == nil {
			continue // an index entry whose record is gone
		}
		rec, err := parseRecord(vals, now)
		if err != nil {
			return nil, fmt.Errorf("redisstore: list: %w", err)
		}
		if seen[rec.ID] || (p.After != nil && !p.After.Less(rec.ID)) || !p.Matches(&rec) {
			continue
		}
		seen[rec.ID] = true
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.Less(out[j].ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// recordFields are prelude's F, the fields of a record in reply order.
var recordFields = []string{"sc", "op", "ky", "fp", "st", "ow", "v", "le", "ex", "rq", "rs", "to", "at", "ca", "ua", "tn", "nt", "om"}

var _ runtime.Lister = (*Store)(nil)
