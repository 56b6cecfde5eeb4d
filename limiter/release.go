package limiter

// Handback describes the unused tail of a grant that a client pool returns.
// All times are on the limiter's clock, as in the grant's Result.
type Handback struct {
	Sched    int64 // the grant's Scheduled
	End      int64 // State.Next right after the grant
	PaceUsed int64 // the pace had only the used permits been granted
	Unused   int64 // ns of schedule the unused permits cost
	Permits  int64 // how many permits are handed back
	RemUsed  int64 // the carry after the used permits
	RemAfter int64 // the carry after the whole grant
}

// HandbackOf computes the hand-back of the last m of k permits granted by r,
// when the carry before the grant was remBefore and Next after it was end.
func (p *Params) HandbackOf(r Result, remBefore, end, k, m int64) Handback {
	m = min(max(m, 0), k)
	used, remUsed := p.Slice.Cost(k-m, remBefore)
	_, remAfter := p.Slice.Cost(k, remBefore)
	return Handback{
		Sched:    r.Scheduled,
		End:      end,
		PaceUsed: r.Start + p.PaceOf(used),
		Unused:   (end - r.Scheduled) - used,
		Permits:  m,
		RemUsed:  remUsed,
		RemAfter: remAfter,
	}
}

// Release takes back the unused tail of a grant. If the schedule has not moved
// since (current: the limiter's version is the grant's; Next and the carry are
// as the grant left them), it is rewound so the permits go to the next caller;
// otherwise their time moves from allocated to idle and is lost to everyone.
// It reports whether the schedule was rewound.
//
// A window gives the permits back to its count while the grant's window is
// the current one (Next is the window's end the grant saw, whatever the
// version), never below 0, and reports true; a window that has moved on
// since keeps its count (the grant's window is over). Either way the permits
// leave the total granted, as a schedule's do.
func (p *Params) Release(s *State, h Handback, current bool) bool {
	if !s.Started {
		return false
	}
	if p.engine().counts {
		s.Permits -= h.Permits
		if s.Next != h.End {
			return false
		}
		s.Stored -= min(h.Permits, s.Stored)
		return true
	}
	unused := max(0, min(h.Unused, h.End-h.Sched))
	rewound := p.engine().rewinds && current && s.Next == h.End && s.Rem == h.RemAfter
	if rewound {
		s.Next = h.End - unused
		s.Rem = h.RemUsed
		s.Pace = h.PaceUsed
	} else {
		s.Idle += unused
	}
	s.Allocated -= unused
	s.Permits -= h.Permits
	return rewound
}
