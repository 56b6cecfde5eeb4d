package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
)

// Decision totals and the busiest instances of templates, as every limitd
// sharing the Redis adds them (Tally). Every command touches one key:
//
//	{name}:t            hash gc gp rc rp: a limiter's or instance's totals
//	{id}:tt             hash: a template's totals (all its instances)
//	{id}:top:r:MINUTE   sorted set: instances by refused permits that minute
//	{id}:top:g:MINUTE   the same by granted permits

var countFields = [4]string{"gc", "gp", "rc", "rp"}

const (
	// TotalsTTL is how long totals are kept after the last decision that
	// added to them: long, but a deleted limiter leaves no key forever.
	TotalsTTL = 30 * 24 * time.Hour
	// TopMinutes is how many minutes of top-instance buckets a query may
	// read; a bucket expires TopMinutes+1 minutes after its minute began.
	TopMinutes = 15
	// TopTTL is a minute bucket's time to live.
	TopTTL = (TopMinutes + 1) * time.Minute
)

func (s *Store) totalsKey(name string) string       { return s.prefix + ":{" + name + "}:t" }
func (s *Store) templateTotalsKey(id string) string { return s.prefix + ":{" + id + "}:tt" }
func (s *Store) topKey(id string, refused bool, minute int64) string {
	by := ":top:g:"
	if refused {
		by = ":top:r:"
	}
	return s.prefix + ":{" + id + "}" + by + strconv.FormatInt(minute, 10)
}

// TotalsBatch is what one process counted in one interval.
type TotalsBatch struct {
	Limiters  map[string]limitd.Counts // named limiters
	Templates map[string]limitd.Counts // templates: the sum of their instances'
	// Top are the minute buckets of templates' busiest instances.
	Top []TopAdd
}

// TopAdd adds permits of a template's instances to its buckets of Minute
// (Unix minutes): Refused and Granted, instance name → permits.
type TopAdd struct {
	Template         string
	Minute           int64
	Refused, Granted map[string]int64
}

// AddTotals adds b to Redis in one pipeline: an HINCRBY per non-zero count,
// a ZINCRBY per top entry, and a PEXPIRE per key it touched.
func (s *Store) AddTotals(ctx context.Context, b TotalsBatch) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		add := func(key string, c limitd.Counts, ttl time.Duration) {
			for i, n := range [4]int64{c.GrantedCalls, c.GrantedPermits, c.RefusedCalls, c.RefusedPermits} {
				if n != 0 {
					p.HIncrBy(ctx, key, countFields[i], n)
				}
			}
			if !c.IsZero() {
				p.PExpire(ctx, key, ttl)
			}
		}
		for name, c := range b.Limiters {
			add(s.totalsKey(name), c, TotalsTTL)
		}
		for id, c := range b.Templates {
			add(s.templateTotalsKey(id), c, TotalsTTL)
		}
		top := func(t TopAdd, refused bool, m map[string]int64) {
			if len(m) == 0 {
				return
			}
			key := s.topKey(t.Template, refused, t.Minute)
			for name, n := range m {
				p.ZIncrBy(ctx, key, float64(n), name)
			}
			p.PExpire(ctx, key, TopTTL)
		}
		for _, t := range b.Top {
			top(t, true, t.Refused)
			top(t, false, t.Granted)
		}
		return nil
	})
	return wrapErr(err)
}

// Totals reads the totals of each of names (named limiters: instances have
// none), in one pipeline; a name nothing was counted for has zero Counts.
func (s *Store) Totals(ctx context.Context, names []string) ([]limitd.Counts, error) {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.totalsKey(n)
	}
	return s.readCounts(ctx, keys)
}

// TemplateTotals reads the totals of template id's instances.
func (s *Store) TemplateTotals(ctx context.Context, id string) (limitd.Counts, error) {
	c, err := s.readCounts(ctx, []string{s.templateTotalsKey(id)})
	if err != nil {
		return limitd.Counts{}, err
	}
	return c[0], nil
}

func (s *Store) readCounts(ctx context.Context, keys []string) ([]limitd.Counts, error) {
	out := make([]limitd.Counts, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, countFields[:]...)
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr(err)
	}
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) != len(countFields) {
			return nil, badReply("totals: HMGET answered %d values", len(v))
		}
		var n [4]int64
		r := &reply{v: v}
		for j, x := range v {
			if x != nil { // a count never added
				n[j] = r.int(j)
			}
		}
		if err := r.check("totals", keys[i]); err != nil {
			return nil, err
		}
		out[i] = limitd.Counts{GrantedCalls: n[0], GrantedPermits: n[1], RefusedCalls: n[2], RefusedPermits: n[3]}
	}
	return out, nil
}

// Top reads template id's busiest instances over the last minutes (1 to
// TopMinutes; the current minute counts as one) by refused or granted
// permits, at most limit of them, largest first (equal sums in reverse name
// order, as ZREVRANGE answers them), each with both numbers. Since is the
// start of the oldest minute read. The sums are computed in Redis, in
// short-lived keys. It does not check that the template exists.
func (s *Store) Top(ctx context.Context, id string, refused bool, limit, minutes int) (since int64, out []limitd.TopInstance, err error) {
	if minutes < 1 || minutes > TopMinutes || limit < 1 {
		return 0, nil, fmt.Errorf("store: top of %q: %d minutes, limit %d", id, minutes, limit)
	}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, nil, wrapErr(err)
	}
	last := now.UnixNano() / int64(time.Minute)
	first := last - int64(minutes) + 1
	var by, other []string
	for m := first; m <= last; m++ {
		by, other = append(by, s.topKey(id, refused, m)), append(other, s.topKey(id, !refused, m))
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := s.prefix + ":{" + id + "}:top:tmp:" + hex.EncodeToString(r[:])
	tmpBy, tmpOther := tmp+":by", tmp+":other"
	var ranked *redis.ZSliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZUnionStore(ctx, tmpBy, &redis.ZStore{Keys: by})
		p.ZUnionStore(ctx, tmpOther, &redis.ZStore{Keys: other})
		p.PExpire(ctx, tmpBy, 10*time.Second) // should the DEL below never come
		p.PExpire(ctx, tmpOther, 10*time.Second)
		ranked = p.ZRevRangeWithScores(ctx, tmpBy, 0, int64(limit)-1)
		return nil
	})
	if err != nil {
		return 0, nil, wrapErr(err)
	}
	zs := ranked.Val()
	names := make([]string, len(zs))
	for i, z := range zs {
		names[i], _ = z.Member.(string)
	}
	var scores *redis.FloatSliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(names) > 0 {
			scores = p.ZMScore(ctx, tmpOther, names...)
		}
		p.Del(ctx, tmpBy, tmpOther)
		return nil
	})
	if err != nil {
		return 0, nil, wrapErr(err)
	}
	out = make([]limitd.TopInstance, len(zs))
	for i, z := range zs {
		n := int64(z.Score)
		var o int64
		if scores != nil && i < len(scores.Val()) {
			o = int64(scores.Val()[i])
		}
		out[i] = limitd.TopInstance{Name: names[i], Refused: n, Granted: o}
		if !refused {
			out[i].Refused, out[i].Granted = o, n
		}
	}
	return first * int64(time.Minute), out, nil
}
