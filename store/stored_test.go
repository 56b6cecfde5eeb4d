package store

import (
	"fmt"
	"slices"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// packedFormat is FORMAT in lua/lib.lua: the layout decodeStored reads.
const packedFormat = 5

// stored is a rate limiter's hash as lua/lib.lua keeps it ("Storage" there),
// decoded: for tests and for looking into Redis by hand.
type stored struct {
	Kind    limiter.Kind
	Version int64
	// Params as the scripts see them: Burst 0 for "inf" (and for smooth),
	// Stable computed from the slice (it is not stored).
	Params        limiter.Params
	Started       bool
	Epoch, Origin int64 // Unix µs
	// Next, Pace, Stored and Last are ns relative to Epoch; Rem is in 1/Den ns.
	Next, Pace, Rem, Stored, Last int64
	// Expires is when an instance's key expires at the earliest (Unix ms;
	// 0: unknown).
	Expires                            int64
	Allocated, Idle, Permits, Lateness int64
}

// decodeStored decodes x (FORMAT 4), everything lib.lua keeps of a rate limiter in one
// packed value ("Storage" there): a named limiter's hash field x, or a
// template instance's string key. ok is false when x is nil (no such
// limiter); a share or concurrency limiter's x is its kind alone. Both forms
// are read: binary (struct.pack) and text (numbers one space apart, where Lua
// lacks struct). The layout is the kind's (lua.Kinds), its parameters the
// kind's (limiter.KindInfo.Params).
func decodeStored(x any) (st stored, ok bool, err error) {
	if x == nil {
		return stored{}, false, nil
	}
	u := newUnpacker(toString(x))
	code := u.uint(1)
	i := slices.IndexFunc(lua.Kinds(), func(k lua.Kind) bool { return int64(k.Code) == code })
	if i < 0 { // a share or concurrency limiter (configure_lease.lua)
		return stored{Kind: limiter.Kind(toString(x))}, true, nil
	}
	k := lua.Kinds()[i]
	st.Kind = limiter.Kind(k.Name)
	info, _ := limiter.Lookup(st.Kind)
	p := &st.Params
	p.Kind = st.Kind
	var hi [4]int64 // the totals' high parts
	totals := []*int64{&st.Allocated, &st.Idle, &st.Permits, &st.Lateness}
	for _, f := range k.Layout[1:] { // after the code
		var v int64
		var fv float64
		switch f.Format {
		case "B":
			v = u.uint(1)
		case "I4":
			v = u.uint(4)
		case "i4":
			v = u.int(4)
		case "i7":
			v = u.int(7)
		case "d":
			fv = u.float()
		default:
			return st, true, fmt.Errorf("store: packed field x: format %q of %s", f.Format, f.Name)
		}
		if f.Format != "d" {
			fv = float64(v)
		}
		switch f.Name {
		case "format":
			if u.err == nil && v != packedFormat {
				return st, true, fmt.Errorf("store: packed field x: format %d, want %d", v, packedFormat)
			}
		case "version":
			st.Version = v
		case "whole":
			p.Slice.Whole = v
		case "frac":
			p.Slice.Frac = v
		case "den":
			p.Slice.Den = v
		case "max_permits":
			p.MaxPermits = v
		case "started":
			st.Started = v == 1
		case "epoch":
			st.Epoch = v
		case "origin":
			st.Origin = v
		case "next":
			st.Next = v
		case "pace":
			st.Pace = v
		case "rem":
			st.Rem = v
		case "stored":
			st.Stored = v
		case "last":
			st.Last = v
		case "expires":
			st.Expires = v
		case "allocated", "idle", "permits", "lateness":
			*totals[slices.Index(totalNames, f.Name)] += v
		case "allocated_hi", "idle_hi", "permits_hi", "lateness_hi":
			hi[slices.Index(totalNames, f.Name[:len(f.Name)-3])] = v
		default:
			j := slices.IndexFunc(info.Params, func(q limiter.Param) bool { return q.Name == f.Name })
			if j < 0 {
				return st, true, fmt.Errorf("store: packed field x: %s is no parameter of %s", f.Name, st.Kind)
			}
			info.Params[j].Set(p, fv)
		}
	}
	for i, t := range totals {
		*t += hi[i] << 32
	}
	if err := u.done("x"); err != nil {
		return st, true, err
	}
	if p.Slice.Den > 0 {
		p.Stable = float64(p.Slice.Whole) + float64(p.Slice.Frac)/float64(p.Slice.Den)
	}
	return st, true, nil
}

// totalNames are the totals' names in x (their low parts; _hi: high parts).
var totalNames = []string{"allocated", "idle", "permits", "lateness"}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
