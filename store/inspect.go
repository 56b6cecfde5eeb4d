package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// Holders reads the holders of the share or concurrency limiter name. A
// limiter of a rate kind is ErrConflict.
func (s *Store) Holders(ctx context.Context, name string) (limitd.Holders, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.Holders{}, err
	}
	var (
		now   *redis.TimeCmd
		head  *redis.SliceCmd
		share *redis.MapStringStringCmd
		slots *redis.ZSliceCmd
	)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		head = p.HMGet(ctx, s.limiterKey(name), "kind", "sh_until", "ver")
		share = p.HGetAll(ctx, s.clientsKey(name))
		slots = p.ZRangeWithScores(ctx, s.slotsKey(name), 0, -1)
		return nil
	})
	if err != nil {
		return limitd.Holders{}, wrapErr(err)
	}
	h := head.Val()
	if len(h) != 3 {
		return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, badReply("HMGET answered %d values", len(h)))
	}
	if h[0] == nil {
		return limitd.Holders{}, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	}
	r := &reply{v: h}
	t := now.Val()
	l := limitd.Holders{Kind: limiter.Kind(r.str(0)), Version: r.int(2), Now: t.UnixNano()}
	if err := r.check("holders", name); err != nil {
		return limitd.Holders{}, err
	}
	us := t.UnixMicro()
	switch l.Kind {
	case limiter.KindShare:
		if u, ok := h[1].(string); ok {
			until, err := strconv.ParseInt(u, 10, 64)
			if err != nil {
				return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, badReply("sh_until %q", u))
			}
			l.Learning = us < until
		}
		for id, v := range share.Val() {
			lease, err := parseShareHolder(id, v)
			if err != nil {
				return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, err)
			}
			if lease.Expires > l.Now { // expired at now: Expires <= now (share.lua)
				l.Share = append(l.Share, lease)
				l.Held += lease.Has
			}
		}
		slices.SortFunc(l.Share, func(a, b limitd.ShareHolder) int { return strings.Compare(a.ClientID, b.ClientID) })
	case limiter.KindConcurrency:
		for _, z := range slots.Val() {
			id, _ := z.Member.(string)
			if exp := int64(z.Score); exp > us { // expired at now: score <= now (concurrency.lua)
				l.Slots = append(l.Slots, limitd.SlotHolder{LeaseID: id, Expires: exp * 1000})
			}
		}
	default:
		return limitd.Holders{}, kindConflict(name, l.Kind)
	}
	return l, nil
}

// parseShareHolder reads a client's entry in a share limiter's client hash:
// "wants has weight expires_us" (lua/share.lua).
func parseShareHolder(id, v string) (limitd.ShareHolder, error) {
	f := strings.Fields(v)
	if len(f) != 4 {
		return limitd.ShareHolder{}, badReply("share lease of %q: %q", id, v)
	}
	var n [4]float64
	for i, w := range f {
		x, err := strconv.ParseFloat(w, 64)
		if err != nil {
			return limitd.ShareHolder{}, badReply("share lease of %q: %q", id, v)
		}
		n[i] = x
	}
	return limitd.ShareHolder{ClientID: id, Wants: n[0], Has: n[1], Priority: n[2], Expires: int64(n[3]) * 1000}, nil
}

// InstanceTTL is the time to live left of template instance name's state,
// ns (0: none).
func (s *Store) InstanceTTL(ctx context.Context, name string) (int64, error) {
	if err := limitd.CheckName(name); err != nil {
		return 0, err
	}
	d, err := s.rdb.PTTL(ctx, s.instanceKey(name)).Result()
	if err != nil {
		return 0, wrapErr(err)
	}
	return max(0, int64(d)), nil // no key (-2) or no TTL (-1): 0
}

const instanceScanBudget = 100_000 // keys InstanceCount scans per node

// InstanceCount counts the instance keys whose names match pattern (a name
// an earlier template also matches counts too). Past instanceScanBudget keys
// on a node, the count is extrapolated from the part scanned and exact is
// false.
func (s *Store) InstanceCount(ctx context.Context, pattern string) (n int64, exact bool, err error) {
	match := s.prefix + ":{" + pattern + "}:i"
	exact = true
	var mu sync.Mutex // nodes run concurrently; each adds to the shared totals
	err = s.eachNode(ctx, func(ctx context.Context, c redis.Cmdable) error {
		mu.Lock()
		defer mu.Unlock()
		var cursor uint64
		var seen, found int64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return err
			}
			found += int64(len(keys))
			seen += 1000
			if cursor = next; cursor == 0 {
				n += found
				return nil
			}
			if seen >= instanceScanBudget {
				size, err := c.DBSize(ctx).Result()
				if err != nil {
					return err
				}
				exact = false
				n += int64(float64(found) / float64(seen) * float64(size))
				return nil
			}
		}
	})
	if err != nil {
		return 0, false, wrapErr(err)
	}
	return n, exact, nil
}
