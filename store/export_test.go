package store

import "context"

// Stored is a rate limiter's hash as lua/lib.lua keeps it, decoded (stored).
type Stored = stored

// ReadStored reads and decodes the limiter at key (a named limiter's hash or
// an instance's string key); ok is false when it does not exist.
func ReadStored(ctx context.Context, s *Store, key string) (st Stored, ok bool, err error) {
	var x any
	switch typ, err := s.rdb.Type(ctx, key).Result(); {
	case err != nil:
		return Stored{}, false, err
	case typ == "hash":
		x, err = s.rdb.HGet(ctx, key, "x").Result()
		if err != nil {
			return Stored{}, false, err
		}
	case typ == "string":
		x, err = s.rdb.Get(ctx, key).Result()
		if err != nil {
			return Stored{}, false, err
		}
	}
	return decodeStored(x)
}

// DecodeStored decodes a packed x (decodeStored).
var DecodeStored = decodeStored

// WithScriptsOnly runs every operation as a script, even where Redis has
// functions (withScriptsOnly).
var WithScriptsOnly = withScriptsOnly
