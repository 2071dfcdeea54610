package redisstore_test

import (
	"hash/fnv"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestKeyLayout checks the documented layout and escaping without a server.
func TestKeyLayout(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	id := runtime.Identity{Scope: "t{1}:a|b\\c%d e\x00", Operation: "Svc.Op", Key: "k:1"}
	rec, pending, expiry := redisstore.KeysOf(s, id)
	name := "t%7B1%7D%3Aa%7Cb%5Cc%25d%20e%00:Svc.Op:k%3A1"
	h := fnv.New32a()
	h.Write([]byte(name))
	b := strconv.Itoa(int(h.Sum32() % redisstore.DefaultBuckets))
	if want := "idem:{" + b + "}:r:" + name; rec != want {
		t.Errorf("record key = %q, want %q", rec, want)
	}
	if pending != "idem:{"+b+"}:pending" || expiry != "idem:{"+b+"}:expiry" {
		t.Errorf("index keys = %q, %q", pending, expiry)
	}
	// User input never contributes a brace: the only hash tag is the bucket.
	if strings.Count(rec, "{") != 1 || strings.Count(rec, "}") != 1 {
		t.Errorf("record key %q has braces besides the bucket tag", rec)
	}
	// Escaping is injective on the probes of the conformance suite and more.
	ids := []runtime.Identity{
		{Scope: "a", Operation: "b:c", Key: "d"}, {Scope: "a:b", Operation: "c", Key: "d"},
		{Scope: "a", Operation: "b", Key: "c:d"}, {Scope: "a%3A", Operation: "b", Key: "c"},
		{Scope: "a:", Operation: "b", Key: "c"}, {Scope: "a", Operation: "%3Ab", Key: "c"},
		{Scope: "", Operation: "a:b", Key: "c"}, {Scope: "a}", Operation: "{b", Key: "d"},
		{Scope: "a\\", Operation: "b", Key: "c"}, {Scope: "a", Operation: "\\b", Key: "c"},
	}
	seen := map[string]runtime.Identity{}
	for _, id := range ids {
		k, _, _ := redisstore.KeysOf(s, id)
		if prev, dup := seen[k]; dup {
			t.Errorf("%+v and %+v share the key %q", prev, id, k)
		}
		seen[k] = id
	}
	// Buckets spread.
	used := map[string]bool{}
	for i := range 5000 {
		used[redisstore.BucketOf(s, runtime.Identity{Scope: "s", Operation: "o", Key: strconv.Itoa(i)})] = true
	}
	if len(used) != redisstore.DefaultBuckets {
		t.Errorf("5000 keys used %d of %d buckets", len(used), redisstore.DefaultBuckets)
	}
}

// FuzzKeysInjective: two different identities never share a record key, and
// user input never adds a hash tag. `go test` runs the seeds; run
// `go test -fuzz FuzzKeysInjective ./runtime/redisstore` to search further.
func FuzzKeysInjective(f *testing.F) {
	f.Add("a", "b:c", "d", "a:b", "c", "d")
	f.Add("a", "b", "c:d", "a:b", "c", "d")
	f.Add("a%3A", "b", "c", "a:", "b", "c")
	f.Add("a}", "{b", "d", "a", "}{b", "d")
	f.Add("a\\", "b", "c", "a", "\\b", "c")
	f.Add("", "a:b", "c", "a", "b", "c")
	f.Add("x\x00y", "op", "k", "x", "\x00yop", "k")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s1, o1, k1, s2, o2, k2 string) {
		a := runtime.Identity{Scope: s1, Operation: o1, Key: k1}
		b := runtime.Identity{Scope: s2, Operation: o2, Key: k2}
		ka, _, _ := redisstore.KeysOf(s, a)
		kb, _, _ := redisstore.KeysOf(s, b)
		if a != b && ka == kb {
			t.Fatalf("%+v and %+v share the key %q", a, b, ka)
		}
		if strings.Count(ka, "{") != 1 || strings.Count(ka, "}") != 1 {
			t.Fatalf("key %q of %+v has a hash tag besides the bucket's", ka, a)
		}
	})
}
