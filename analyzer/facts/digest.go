package facts

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"reflect"
	"sort"
)

// Digest hashes what the packages with these paths contributed to the
// Program (their named types, their methods' summaries, the interface
// calls they make, and what they record of row locks and blind helpers),
// in an order of its own. A driver that forgets and
// analyzes a package again compares the digests of before and after: when
// they are equal, every interface call resolves as it did, and a package
// whose own inputs did not change needs no second pass again.
func (p *Program) Digest(paths ...string) [sha256.Size]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	paths = append([]string(nil), paths...)
	sort.Strings(paths)
	h := sha256.New()
	for i, path := range paths {
		if i > 0 && paths[i-1] == path {
			continue
		}
		fmt.Fprintf(h, "package %q\n", path)
		c := p.owned[path]
		if c != nil {
			for _, k := range sortedKeys(c.named) {
				fmt.Fprintf(h, "named %q ", k)
				deepHash(h, reflect.ValueOf(p.named[k]))
			}
			for _, k := range sortedKeys(c.methods) {
				fmt.Fprintf(h, "method %q ", k)
				deepHash(h, reflect.ValueOf(p.methods[k]))
			}
		}
		fmt.Fprint(h, "calls ")
		deepHash(h, reflect.ValueOf(p.calls[path]))
		// blindupdate's callers' row locks: a caller that stops locking
		// changes its helper's finding in another package. Written the
		// same whether or not any package recorded locks yet.
		var (
			lockers map[string][]string
			sites   map[string][]lockSite
			escapes []lockSite
			helper  bool
		)
		if l := p.locks; l != nil {
			lockers, sites, escapes, helper = l.lockers[path], l.sites[path], l.escapes[path], l.helpers[path]
		}
		fmt.Fprint(h, "lockers ")
		deepHash(h, reflect.ValueOf(lockers))
		fmt.Fprint(h, "sites ")
		deepHash(h, reflect.ValueOf(sites))
		fmt.Fprint(h, "escapes ")
		deepHash(h, reflect.ValueOf(escapes))
		fmt.Fprintf(h, "helper %v\n", helper)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// deepHash writes v to h, following pointers, with map keys sorted and
// unexported fields included: the summaries are plain data (strings,
// numbers, and slices, maps and structs of them).
func deepHash(h hash.Hash, v reflect.Value) {
	switch v.Kind() {
	case reflect.Invalid:
		h.Write([]byte("nil;"))
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			h.Write([]byte("nil;"))
			return
		}
		h.Write([]byte("&"))
		deepHash(h, v.Elem())
	case reflect.Struct:
		h.Write([]byte("{"))
		for i := range v.NumField() {
			deepHash(h, v.Field(i))
		}
		h.Write([]byte("}"))
	case reflect.Slice, reflect.Array:
		fmt.Fprintf(h, "[%d:", v.Len())
		for i := range v.Len() {
			deepHash(h, v.Index(i))
		}
		h.Write([]byte("]"))
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		fmt.Fprintf(h, "map%d:", v.Len())
		for _, k := range keys {
			deepHash(h, k)
			deepHash(h, v.MapIndex(k))
		}
		h.Write([]byte(";"))
	case reflect.String:
		fmt.Fprintf(h, "%q;", v.String())
	case reflect.Bool:
		fmt.Fprintf(h, "%t;", v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		fmt.Fprintf(h, "%d;", v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		fmt.Fprintf(h, "%d;", v.Uint())
	case reflect.Float32, reflect.Float64:
		fmt.Fprintf(h, "%g;", v.Float())
	default:
		// A kind the summaries do not hold (a func, a channel): a new
		// field of such a kind must be hashed here, not skipped, or two
		// different Programs could have one digest.
		panic("facts.Program.Digest: cannot hash a " + v.Kind().String())
	}
}
