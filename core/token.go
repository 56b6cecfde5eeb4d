package core

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// A grant token carries what a handback needs of a grant, so that no
// replica has to keep the grants it issued:
//
//	"g1." base64url(payload ‖ check)
//	payload: kind byte (1 schedule, 2 smooth, 3 window), then varints epoch (µs),
//	  version, permits, scheduled, start, end (Unix ns), rem_before,
//	  slice whole, frac, den, a uvarint nonce, and the burst's 8 bytes
//	  (IEEE 754, +Inf for "inf")
//	check: the first 8 bytes of SHA-256(name ‖ 0 ‖ payload)
//
// The check binds the token to its limiter and catches a garbled one; it is
// not a signature: a forged token can at worst hand back what release.lua
// accepts of a grant of that limiter. Decoding checks every field's range,
// so that nothing a token says can fail the store call.
const (
	tokenPrefix = "g1."
	maxToken    = 256 // bounds a token read (a real one is about 110)
	checkLen    = 8
	// times within what lib.lua keeps exact (below 2^53 ns from the
	// epoch), an epoch before the year 2200
	maxExact = 1 << 53
	maxEpoch = 7_258_118_400_000_000 // 2200-01-01 in µs
)

func tokenCheck(name string, payload []byte) []byte {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)[:checkLen]
}

func encodeToken(g limitd.Grant) string {
	o := g.Origin()
	info, _ := limiter.Lookup(g.Kind) // a grant's kind is a rate kind
	b := make([]byte, 0, 96)
	b = append(b, byte(info.Code))
	for _, v := range []int64{o.Epoch, g.Version, g.Permits, g.Scheduled, g.Start, g.End, g.RemBefore,
		g.Slice.Whole, g.Slice.Frac, g.Slice.Den} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, o.Nonce)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(g.Burst))
	b = append(b, tokenCheck(g.Name, b)...)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

var errToken = errors.New("undecodable")

// decodeToken returns the grant of limiter name that token carries, or bad
// input naming grant.id.
func decodeToken(token, name string) (limitd.Grant, error) {
	bad := func(why string) (limitd.Grant, error) {
		return limitd.Grant{}, invalid("grant.id", fmt.Sprintf("must be the id a grant of limiter %q answered (%s)", name, why), nil)
	}
	if len(token) > maxToken || !strings.HasPrefix(token, tokenPrefix) {
		return bad("not a grant token")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token[len(tokenPrefix):])
	if err != nil || len(b) < 1+checkLen {
		return bad("not a grant token")
	}
	payload, check := b[:len(b)-checkLen], b[len(b)-checkLen:]
	if string(tokenCheck(name, payload)) != string(check) {
		return bad("garbled, or a grant of another limiter")
	}
	g, err := readPayload(payload)
	if err != nil {
		return bad(err.Error())
	}
	g.Name = name
	return g, nil
}

func readPayload(p []byte) (limitd.Grant, error) {
	g := limitd.Grant{Decision: limitd.Decision{Granted: true}}
	for _, k := range limiter.Kinds() {
		if k.Class == limiter.ClassRate && k.Code == int(p[0]) {
			g.Kind = k.Name
		}
	}
	if g.Kind == "" {
		return g, fmt.Errorf("%w kind", errToken)
	}
	p = p[1:]
	var epoch int64
	for _, to := range []*int64{&epoch, &g.Version, &g.Permits, &g.Scheduled, &g.Start, &g.End, &g.RemBefore,
		&g.Slice.Whole, &g.Slice.Frac, &g.Slice.Den} {
		v, n := binary.Varint(p)
		if n <= 0 {
			return g, errToken
		}
		*to, p = v, p[n:]
	}
	nonce, n := binary.Uvarint(p)
	if n <= 0 || len(p[n:]) != 8 {
		return g, errToken
	}
	g.Burst = math.Float64frombits(binary.BigEndian.Uint64(p[n:]))
	g.SetOrigin(limitd.GrantOrigin{Epoch: epoch, Nonce: nonce})
	base := epoch * 1000
	exact := func(t int64) bool { return t-base > -maxExact && t-base < maxExact }
	switch {
	case nonce == 0, epoch <= 0, epoch > maxEpoch:
		return g, fmt.Errorf("%w origin", errToken)
	case g.Permits < 1, g.Version < 0:
		return g, fmt.Errorf("%w size", errToken)
	case !exact(g.Scheduled), !exact(g.Start), !exact(g.End), g.Scheduled > g.End:
		return g, fmt.Errorf("%w times", errToken)
	case g.Slice.Den < 1, g.Slice.Frac < 0, g.Slice.Frac >= g.Slice.Den, g.Slice.Whole < 0, g.RemBefore < 0, g.RemBefore >= maxExact:
		return g, fmt.Errorf("%w slice", errToken)
	case !(g.Burst >= 1): // NaN too
		return g, fmt.Errorf("%w burst", errToken)
	}
	g.Position = g.End
	return g, nil
}
