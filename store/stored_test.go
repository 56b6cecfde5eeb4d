package store

import (
	"fmt"

	"github.com/limitd/limitd/limiter"
)

// packedFormat is FORMAT in lua/lib.lua: the layout decodeStored reads.
const packedFormat = 3

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
	Next, Pace, Rem, Stored, Last      int64
	Allocated, Idle, Permits, Lateness int64
}

// decodeStored decodes x (FORMAT 3), everything lib.lua keeps of a rate limiter in one
// packed value ("Storage" there): a named limiter's hash field x, or a
// template instance's string key. ok is false when x is nil (no such
// limiter); a share or concurrency limiter's x is its kind alone. Both forms
// are read: binary (struct.pack) and text (numbers one space apart, where Lua
// lacks struct).
func decodeStored(x any) (st stored, ok bool, err error) {
	if x == nil {
		return stored{}, false, nil
	}
	u := newUnpacker(toString(x))
	switch code := u.uint(1); code {
	case 1:
		st.Kind = limiter.KindSchedule
	case 2:
		st.Kind = limiter.KindSmooth
	default:
		// A share or concurrency limiter (configure_lease.lua).
		return stored{Kind: limiter.Kind(toString(x))}, true, nil
	}
	if f := u.uint(1); u.err == nil && f != packedFormat {
		return st, true, fmt.Errorf("store: packed field x: format %d, want %d", f, packedFormat)
	}
	st.Version = u.int(7)
	p := &st.Params
	p.Kind = st.Kind
	p.Slice = limiter.Slice{Whole: u.int(7), Frac: u.uint(4), Den: u.uint(4)}
	p.MaxPermits = u.int(7)
	if st.Kind == limiter.KindSchedule { // burst max_backlog: 'di7'
		p.Burst, p.MaxBacklog = u.float(), u.int(7)
	} else { // cap initial warm cooldown threshold slope: 'i7i7Bddd'
		p.Cap, p.Initial, p.Warm = u.int(7), u.int(7), u.uint(1) == 1
		p.Cooldown, p.Threshold, p.Slope = u.float(), u.float(), u.float()
	}
	// state and totals (STATE, RUN, REST): started epoch 'Bi7', next pace
	// rem 'i7i7i4', the totals' low parts 'i7' x4, last 'i7', origin stored
	// 'i7i7', their high parts 'i4' x4
	st.Started = u.uint(1) == 1
	st.Epoch = u.int(7)
	st.Next, st.Pace, st.Rem = u.int(7), u.int(7), u.int(4)
	totals := []*int64{&st.Allocated, &st.Idle, &st.Permits, &st.Lateness}
	var lo [4]int64
	for i := range totals {
		lo[i] = u.int(7)
	}
	st.Last = u.int(7)
	st.Origin, st.Stored = u.int(7), u.int(7)
	for i, t := range totals {
		*t = u.int(4)<<32 + lo[i]
	}
	if err := u.done("x"); err != nil {
		return st, true, err
	}
	if p.Slice.Den > 0 {
		p.Stable = float64(p.Slice.Whole) + float64(p.Slice.Frac)/float64(p.Slice.Den)
	}
	return st, true, nil
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
