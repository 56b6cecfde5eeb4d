package limiter

// Clock steps and floors: see the package doc, "Clocks and floors". A step
// back moves Next and Pace back by the step, Origin staying as it was.

// A state born after its floor. The position a floor carries is where the
// schedule stood when its caller last heard of it: a process whose callers
// waited their turn meanwhile (a schedule kept seconds ahead of the clock by
// callers of several processes, each taking its slots in turn) may carry a
// position the clock has passed by the time a restart without persistence
// empties Redis, while slots beyond now granted to the other processes were
// lost with the state. Tested against Next alone, such a floor would find
// nothing lost, and the fresh schedule would grant those slots again from
// now. So a state whose Origin is later than the floor's Seen (it started
// after the schedule the floor saw: that one is gone) counts as having lost
// what the floor saw, whatever its position, and resumes as far ahead of now
// as the floor's Ahead, as any lost state does. This holds while the floor
// is younger than twice its Ahead: a caller queued Ahead in front of the
// clock hears of the schedule again within about that time, so an older
// position says nothing of slots beyond now; past it, only its position
// counts, as for any state (so an instance that expired after an idle TTL
// longer than the Ahead, or a limiter deleted and made again later, starts
// afresh). Within it, a state made again after a deletion or an expiry is
// held back as a lost one is: at most the Ahead its caller was told of. A
// counting kind (window) keeps no queue: a window the clock has passed is
// over whatever its state.

// FloorAge is how old a floor may be (now − Seen, ns) and still count: a
// position seen this long ago is behind anything a state could rewind to
// that matters (a backlog further back is forfeited or settled as idle).
const FloorAge int64 = 1 << 42 * 1000 // 2^42 µs, ~51 days

// floorBack bounds how far behind now a floor may lie (lua/lib.lua FAR).
const floorBack int64 = 1 << 52

// Floor is what a caller knows of a schedule from an earlier answer: the
// position it was told, Seen + Ahead, where Seen is the time of that answer
// (ns, on that answer's clock).
type Floor struct {
	Seen  int64
	Ahead int64
}

// Observe brings s to time now: a now earlier than Last is a clock step back,
// by which the state is moved back (the package doc, "Clocks and floors").
// Every operation observes its now (Peek on a copy).
func (s *State) Observe(now int64) {
	if !s.Started || now >= s.Last {
		return
	}
	step := s.Last - now
	s.Next -= step
	s.Pace -= step
	s.Last = now
}

// bornAfter reports whether s started after the floor f was seen, recently
// enough that the queue f saw may still hold slots ahead of now (see "A
// state born after its floor" above); ahead is f's Ahead as clamped. A state
// whose clock stepped back behind its Origin (Last before it) does not tell:
// its Origin is on the clock before the step, and the floors seen since on
// the clock after it.
func (p *Params) bornAfter(s *State, now int64, f Floor, ahead int64) bool {
	return !p.engine().counts && s.Origin > f.Seen && s.Last >= s.Origin && now-f.Seen < 2*ahead
}

// ApplyFloor starts s at now if needed and keeps its schedule from starting
// before the floor f: when the state lost grants (f's position is ahead of
// Next, or s started after f was seen: bornAfter), Next moves up to f's
// position, or to now + f.Ahead if that is later (the time in between counts
// as idle; what the state forgot granting is gone for everyone), a
// schedule's pace with it, and a smooth limiter's stored permits are dropped
// (the state that lost the grants may also have lost their spending). A
// floor older than FloorAge, or more than 2^52 ns behind now, changes nothing.
func (p *Params) ApplyFloor(s *State, now int64, f Floor) {
	s.Observe(now)
	p.Start(s, now)
	if now-f.Seen >= FloorAge {
		return
	}
	ahead := min(max(f.Ahead, -floorBack), 2*Horizon)
	at := f.Seen + ahead
	if now < f.Seen { // the clock stepped back since the floor was seen
		at = now + ahead
	}
	if at <= now-floorBack || (at <= s.Next && !p.bornAfter(s, now, f, ahead)) {
		return
	}
	// The state lost what the floor saw. Other callers may have been granted
	// more since: while callers keep a schedule ahead of the clock, its
	// position moves on with the clock. So the schedule resumes as far ahead of
	// now as it was of the floor's Seen (never before the floor itself): at
	// most the floor's Ahead more than the position seen, which is the wait
	// its caller was told of.
	at = max(at, now+ahead)
	if at <= s.Next {
		return
	}
	s.Idle += at - s.Next
	s.Next = at
	p.engine().floor(s, at)
}
