package client

import (
	"math"
	"time"
)

// schedPart estimates the part of a shared schedule this process takes, the
// fallback's safe rate as a fraction of the shared rate, from the process's
// own grants: each shows how far the schedule's end moved since the
// process's previous grant (its own permits and everyone else's) and how
// much of that was its own.
//
// A process's grants come in runs: its callers, all waiting, ask again when
// their permits come up, so on a queued schedule each process takes a run of
// it in turn. A ratio over a window of schedule then depends on where the
// window's edges fall among the runs (the processes' estimates added up to
// 1.04–1.08 over two-second windows), and so would their fallbacks' rates.
// So the part is smoothed twice in a row, each time exponentially over
// schedule time with the time constant partTau, which damps a period of two
// seconds to about 2 % of its swing; early on it is normalised by what the
// smoothing has seen so far.
type schedPart struct {
	end  int64   // the schedule's end after the last grant (Redis ns); 0: none yet
	y, z float64 // the part smoothed once, and twice
	span float64 // schedule ns observed since the first grant
}

// partTau is the time constant of schedPart's smoothing, in schedule time.
const partTau = float64(2 * time.Second)

// add records a grant that took cost ns of the schedule and left its end at end.
func (s *schedPart) add(end, cost int64) {
	if s.end == 0 {
		s.end = end // where the measure starts: nothing is known of the others yet
		return
	}
	// The schedule moved by at least this grant (less: it was rewound, by a
	// hand-back or a lost state).
	dt := float64(max(end-s.end, cost))
	s.end = end
	e := math.Exp(-dt / partTau)
	s.z = s.z*e + s.y*(dt/partTau)*e // z follows y, which decays meanwhile
	s.y = s.y*e + float64(cost)/partTau
	s.span += dt
}

// pause keeps the estimate as it is until the grant after next: the next
// grant shows where the schedule's end stands, the one after how far it
// moved since.
func (s *schedPart) pause() { s.end = 0 }

// part is the estimate, between 0 and 1; 0 before two grants.
func (s *schedPart) part() float64 {
	if s.span <= 0 {
		return 0
	}
	x := s.span / partTau
	// What each smoothing of a part of 1 would read after x: the estimates
	// are divided by it.
	n1 := -math.Expm1(-x)
	n2 := n1 - x*math.Exp(-x)
	if x < 1 || n2 <= 0 {
		return min(1, s.y/n1) // early: once smoothed, a plain ratio at first
	}
	return min(1, s.z/n2)
}
