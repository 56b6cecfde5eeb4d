package store

import "context"

// Stored is a rate limiter's hash as lua/lib.lua keeps it, decoded (stored).
type Stored = stored

// ReadStored reads and decodes the hash at key; ok is false when it does not
// exist.
func ReadStored(ctx context.Context, s *Store, key string) (st Stored, ok bool, err error) {
	v, err := s.rdb.HMGet(ctx, key, storedFields...).Result()
	if err != nil {
		return Stored{}, false, err
	}
	return decodeStored(v)
}

// DecodeStored decodes the reply to HMGET kind ver p s t (decodeStored).
var DecodeStored = decodeStored

// WithScriptsOnly runs every operation as a script, even where Redis has
// functions (withScriptsOnly).
var WithScriptsOnly = withScriptsOnly
