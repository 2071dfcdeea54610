package redisstore

import "github.com/idemkit/idem/runtime"

// KeysOf returns the record key of id and the index keys of its bucket.
func KeysOf(s *Store, id runtime.Identity) (rec, pending, expiry string) {
	k := s.keysOf(id)
	return k.rec, k.pending, k.expiry
}
