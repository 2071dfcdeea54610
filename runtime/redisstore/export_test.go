package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
)

// KeysOf returns the record key of id and the index keys of its bucket.
func KeysOf(s *Store, id runtime.Identity) (rec, pending, expiry string) {
	k := s.keysOf(id)
	return k.rec, k.pending, k.expiry
}

// CheckIndexes scans every key under the store's prefix and checks that
// each record is well formed, lives under the key of its identity, carries
// a Redis expiry exactly when it is finished, and is in the pending or the
// expiry index of its bucket (with its lease or ExpiresAt as score) exactly
// when its state says so, and that every pending-index entry names a
// record. It returns the number of records.
func CheckIndexes(ctx context.Context, s *Store) (int, error) {
	var (
		mu   sync.Mutex // ForEachMaster scans the masters concurrently
		keys []string
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.c)
	}
	if err != nil {
		return 0, err
	}
	records := 0
	for _, key := range keys {
		switch {
		case strings.Contains(key, "}:r:"):
			records++
			if err := s.checkRecord(ctx, key); err != nil {
				return 0, err
			}
		case strings.HasSuffix(key, "}:pending"):
			members, err := s.c.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				return 0, err
			}
			for _, m := range members {
				if n, err := s.c.Exists(ctx, m).Result(); err != nil || n != 1 {
					return 0, fmt.Errorf("pending index %s names %s, which does not exist (%v)", key, m, err)
				}
			}
		case strings.HasSuffix(key, "}:expiry"), strings.HasSuffix(key, "}:version"), strings.Contains(key, "}:acq:"), strings.Contains(key, "}:rel:"):
		default:
			return 0, fmt.Errorf("unexpected key %q", key)
		}
	}
	return records, nil
}

func (s *Store) checkRecord(ctx context.Context, key string) error {
	f, err := s.c.HGetAll(ctx, key).Result()
	if err != nil {
		return err
	}
	id := runtime.Identity{Scope: f["sc"], Operation: f["op"], Key: f["ky"]}
	k := s.keysOf(id)
	if k.rec != key {
		return fmt.Errorf("record %s holds identity %+v, whose key is %s", key, id, k.rec)
	}
	st := runtime.State(f["st"])
	if !st.Valid() {
		return fmt.Errorf("record %s: state %q", key, st)
	}
	num := map[string]int64{}
	for _, name := range []string{"v", "le", "ex", "to", "at", "ca", "ua"} {
		n, err := strconv.ParseInt(f[name], 10, 64)
		if err != nil {
			return fmt.Errorf("record %s: field %s: %v", key, name, err)
		}
		num[name] = n
	}
	if num["v"] < 1 {
		return fmt.Errorf("record %s: version %d", key, num["v"])
	}
	ttl, err := s.c.PTTL(ctx, key).Result()
	if err != nil {
		return err
	}
	// PTTL answers -1 for a key without a TTL and -2 for a key that is gone:
	// a finished record whose TTL is a few milliseconds may expire between
	// the HGETALL and the PTTL (or answer 0, expiring now), which is the TTL
	// doing its work. A finished record must have a TTL; any other, none.
	const noTTL, gone = time.Duration(-1), time.Duration(-2)
	if ttl != gone && st.Final() == (ttl == noTTL) {
		return fmt.Errorf("record %s is %s with Redis TTL %v", key, st, ttl)
	}
	wantPending := st == runtime.StateUnknown || (st == runtime.StateProcessing && num["le"] > 0)
	if err := s.checkMember(ctx, k.pending, key, wantPending, num["le"]); err != nil {
		return err
	}
	return s.checkMember(ctx, k.expiry, key, st.Final(), num["ex"])
}

func (s *Store) checkMember(ctx context.Context, index, key string, want bool, score int64) error {
	got, err := s.c.ZScore(ctx, index, key).Result()
	if err == redis.Nil {
		if want {
			return fmt.Errorf("%s is missing from %s", key, index)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !want {
		return fmt.Errorf("%s is in %s but should not be", key, index)
	}
	if int64(got) != score {
		return fmt.Errorf("%s has score %.0f in %s, want %d", key, got, index, score)
	}
	return nil
}

// ClaimWithNonce and TransitionWithNonce run the scripts with a given nonce,
// as a client-side resend of the same call would.
func ClaimWithNonce(ctx context.Context, s *Store, p runtime.ClaimParams, nonce string) (runtime.ClaimResult, error) {
	return s.claim(ctx, p, nonce)
}

// ReleaseWithNonce runs the release script with a given nonce.
func ReleaseWithNonce(ctx context.Context, s *Store, p runtime.ReleaseParams, nonce string) error {
	return s.release(ctx, p, nonce)
}

func TransitionWithNonce(ctx context.Context, s *Store, p runtime.TransitionParams, nonce string) (int64, error) {
	return s.transition(ctx, p, nonce)
}

// BucketOf returns the bucket number in the record key of id.
func BucketOf(s *Store, id runtime.Identity) string {
	k := s.keysOf(id).rec
	return k[strings.IndexByte(k, '{')+1 : strings.IndexByte(k, '}')]
}

// AcquireWithNonce runs AcquirePending with the nonces a resend of the same
// call would carry.
func AcquireWithNonce(ctx context.Context, s *Store, p runtime.AcquireParams, nonce string) ([]runtime.Record, error) {
	return s.acquirePending(ctx, p, func(b, run int) string { return nonce + ":" + strconv.Itoa(b) + ":" + strconv.Itoa(run) })
}

// SetClaimOrder fixes the order of a claim's steps: order > 0 always reads
// first, order < 0 always runs the claim script first, 0 guesses.
func SetClaimOrder(s *Store, order int) { s.order.Fix(order) }

// ClaimByScript runs the claim script alone, with no read first.
func ClaimByScript(ctx context.Context, s *Store, p runtime.ClaimParams, nonce string) (runtime.ClaimResult, error) {
	return s.runClaim(ctx, s.keysOf(p.ID), p, nonce)
}
