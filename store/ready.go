package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// UnavailableError is every error that means Redis cannot serve limitd now;
// it matches ErrUnavailable. Condition names what is wrong in Redis' own
// words where Redis said it (READONLY, OOM, ...) and in a few plain ones
// otherwise (timeout, ...), so that an operator reading a 503 knows what to
// fix; where the fix is known, it also matches one of the causes below.
type UnavailableError struct {
	Condition string
	err       error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v (%s): %v", ErrUnavailable, e.Condition, e.err)
}

// Is makes errors.Is(err, ErrUnavailable) true, and errors.Is(err, cause)
// for the cause its condition means.
func (e *UnavailableError) Is(target error) bool {
	return target == ErrUnavailable || target != nil && target == conditionCause[e.Condition]
}

// The causes of unavailability an operator fixes in a known way: an
// *UnavailableError matches at most one of them besides ErrUnavailable.
var (
	// ErrUnauthorized: Redis refused limitd's credentials (WRONGPASS, NOAUTH)
	// or its user may not run a command or touch a key (NOPERM).
	ErrUnauthorized = errors.New("redis refused limitd's credentials or permissions")
	// ErrLoading: Redis is loading its dataset (LOADING) and answers nothing
	// else until it is done.
	ErrLoading = errors.New("redis is loading its dataset")
	// ErrReadOnly: the Redis limitd writes to is a read-only replica
	// (READONLY).
	ErrReadOnly = errors.New("redis is read-only")
)

var conditionCause = map[string]error{
	"WRONGPASS": ErrUnauthorized,
	"NOAUTH":    ErrUnauthorized,
	"NOPERM":    ErrUnauthorized,
	"LOADING":   ErrLoading,
	"READONLY":  ErrReadOnly,
}

func (e *UnavailableError) Unwrap() error { return e.err }

// Describe says in one sentence what the condition means and what to look
// at, without the underlying error's text: safe to show to any client.
func (e *UnavailableError) Describe() string {
	if d, ok := conditionText[e.Condition]; ok {
		return e.Condition + ": " + d
	}
	return e.Condition
}

// ConditionUnknownLayout is the condition of one limiter whose state is in a
// packed layout this limitd does not read (written by a newer one): unlike
// the others, it is that limiter's alone, not Redis's.
const ConditionUnknownLayout = "UNKNOWN LAYOUT"

var conditionText = map[string]string{
	"WRONGPASS":            "Redis refused limitd's user name or password",
	"NOAUTH":               "Redis needs a password and limitd gave none",
	"NOPERM":               "Redis' access rules (ACL) do not let limitd's user run a command or touch a key it needs",
	"READONLY":             "Redis is a read-only replica; limitd must be pointed at the master",
	"OOM":                  "Redis is out of memory (used memory over maxmemory with a noeviction policy)",
	"LOADING":              "Redis is loading its dataset into memory",
	"MASTERDOWN":           "the replica lost its link to the master",
	"CLUSTERDOWN":          "the Redis Cluster is down (a hash slot has no master)",
	"TRYAGAIN":             "a cluster slot is being migrated",
	"MOVED":                "the cluster's slots moved",
	"ASK":                  "the cluster's slots are moving",
	"NOREPLICAS":           "not enough replicas are connected to accept writes (min-replicas-to-write)",
	"BUSY":                 "Redis is busy running a script or function",
	"FUNCTION NOT FOUND":   "limitd's function library is missing and could not be loaded (a replica, or the library was flushed)",
	"timeout":              "Redis did not answer in time",
	"connection refused":   "nothing listens at the Redis address",
	"connection lost":      "the connection to Redis was closed",
	"connection failed":    "could not reach Redis",
	"client closed":        "the Redis client is closed (limitd is shutting down)",
	"slots not covered":    "some cluster hash slots have no master",
	ConditionUnknownLayout: "a limiter's state in Redis is in a packed layout this limitd does not read: written by a newer limitd (upgrade every process that shares the Redis)",
	"request interrupted":  "the request ended before Redis answered",
}

// redisCondition returns the condition a Redis error reply means, or "" when
// it does not mean that Redis is unavailable. go-redis' classification
// decides the credentials, permissions, loading and read-only replies,
// wherever Redis gave them (a command, a script, the AUTH or HELLO).
func redisCondition(err error) string {
	msg := err.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch {
	case redis.IsAuthError(err):
		if code == "WRONGPASS" {
			return code
		}
		// NOAUTH, or a command too long for a connection not
		// authenticated ("ERR Protocol error: unauthenticated multibulk
		// length"): no password, where Redis wants one.
		return "NOAUTH"
	case redis.IsPermissionError(err):
		return "NOPERM"
	case redis.IsLoadingError(err):
		return "LOADING"
	case redis.IsReadOnlyError(err):
		return "READONLY"
	}
	switch code {
	case "LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "MOVED", "ASK", "OOM", "NOREPLICAS", "BUSY":
		// BUSY is a word of its own; BUSYKEY and BUSYGROUP are not this.
		return code
	}
	if strings.Contains(msg, "limitd: ") && strings.Contains(msg, ": packed state of ") {
		return ConditionUnknownLayout // lua/lib.lua's load (see Storage there)
	}
	if fnMissing(err) { // still missing once loaded again (functions.go)
		return "FUNCTION NOT FOUND"
	}
	return ""
}

func transportCondition(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "request interrupted"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, redis.ErrClosed):
		return "client closed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return "connection lost"
	}
	return "connection failed"
}

// ReadyTimeout bounds Ready: a Redis that does not answer the probe within
// it is not ready.
const ReadyTimeout = time.Second

const probeTTL = 2 * time.Second // a probe key outlives no check

// Ready reports whether limitd can decide now: whether every master it
// needs accepts a write. It writes a tiny key with a short TTL on every
// master (on a cluster: in a slot of every slot range), because only a
// write shows what a PING cannot: READONLY, OOM, NOREPLICAS, LOADING, BUSY.
// It takes at most ReadyTimeout; an error is an *UnavailableError.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var err error
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		err = s.readyCluster(ctx, c)
	} else {
		err = s.eachNode(ctx, func(ctx context.Context, c redis.Cmdable) error {
			return c.Set(ctx, s.prefix+":ready", "1", probeTTL).Err()
		})
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return wrapErr(err)
}

// readyCluster writes one probe key into the first slot of every slot range
// the cluster reports, through the cluster client (which follows MOVED).
func (s *Store) readyCluster(ctx context.Context, c *redis.ClusterClient) error {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	var ranges []redis.SlotRange
	covered := 0
	for _, sh := range shards {
		for _, r := range sh.Slots {
			ranges = append(ranges, r)
			covered += int(r.End - r.Start + 1)
		}
	}
	if covered < clusterSlots {
		return &UnavailableError{Condition: "slots not covered",
			err: fmt.Errorf("the cluster's masters own %d of %d hash slots", covered, clusterSlots)}
	}
	cmds := make([]*redis.StatusCmd, len(ranges))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range ranges {
			cmds[i] = p.Set(ctx, s.prefix+":{"+slotTags()[r.Start]+"}:ready", "1", probeTTL)
		}
		return nil
	})
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return cmd.Err()
		}
	}
	return err
}

const clusterSlots = 16384

// slotTags holds, for every cluster hash slot, the first hash tag
// "ready-<n>" whose key lands in it.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, clusterSlots)
	for n, left := 0, clusterSlots; left > 0; n++ {
		tag := "ready-" + strconv.Itoa(n)
		if sl := keySlot(tag); tags[sl] == "" {
			tags[sl] = tag
			left--
		}
	}
	return tags
})

// keySlot is the cluster hash slot of a key without braces: CRC-16/XMODEM
// modulo 16384, as the Redis Cluster specification defines it.
func keySlot(key string) int {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}
