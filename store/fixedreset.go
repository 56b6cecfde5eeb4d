package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// fixedResetSrc deletes a counter's counts (see Fixed) of the window that
// holds Redis' TIME and of the windows either side: KEYS is the counter's
// base (fixedBase), ARGV its period (ms); the reply is the number of keys
// deleted. The windows either side are those a store whose estimate of
// Redis' clock is off by up to its bound may count in now. The keys share
// the base's hash tag, so one slot. Older windows are never counted again,
// and expire.
const fixedResetSrc = `
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = tonumber(ARGV[1])
local start = ms - ms % p
return redis.call('DEL', KEYS[1] .. string.format('%d', start - p),
  KEYS[1] .. string.format('%d', start), KEYS[1] .. string.format('%d', start + p))
`

var fixedResetScript = redis.NewScript(fixedResetSrc)

// FixedReset starts name's fixed windows of f (see Fixed) afresh: the
// count of the window now, as Redis' clock has it, and those of the
// windows before and after it, are deleted, so that the next charge counts
// from nothing. It is idempotent.
func (s *Store) FixedReset(ctx context.Context, name string, f Fixed) error {
	if err := checkFixed(&Request{Name: name, Charge: true, Fixed: &f}); err != nil {
		return err
	}
	err := fixedResetScript.Run(ctx, s.rdb, []string{s.fixedBase(name)}, int64(f.Period/time.Millisecond)).Err()
	return wrapErr(err)
}
