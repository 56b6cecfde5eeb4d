package limiter

// Clock steps and floors: what keeps a shared schedule from rewinding when the
// store under it does.
//
// A clock step back. The engines take now from the caller (for a shared
// limiter, Redis TIME). When now is earlier than the latest time the state has
// seen (State.Last), the clock stepped back: a failover to a host whose clock
// is behind, or an NTP step. The state is then moved back by the step (Next
// and Pace; Origin stays as it was), so the schedule continues from where it
// stood on the new clock: no caller waits out the step, and no permit is
// granted that the old clock had not yet allowed (time the state had seen is
// not seen twice). Answers come out on the new clock.
//
// A clock step forward looks like idle time: a schedule limiter's backlog
// grows (up to max_backlog, the rest is forfeited) and a smooth limiter stores
// permits (up to its burst), exactly as if nobody had called for that long.
//
// Floors. Redis replication is asynchronous and a restart without persistence
// forgets state, so a limiter's state may come back older than what callers
// were told, or fresh. Every answer carries the schedule's position (Next: the
// scheduled start of the next permit, smooth: next_free) and the time of the
// answer; a caller remembers the furthest it has seen and sends it as a Floor
// with its next request, and the engine never lets the schedule start before
// it (ApplyFloor). A permit granted before a failover is not granted again
// after it.
//
// A floor is on the clock of the answer that carried it. When the clock now is
// behind the floor's Seen (a step back since), the floor is re-anchored at
// now: it keeps the schedule Ahead of now, as far as the caller was told it
// stood ahead then, rather than holding every caller back for the length of
// the step. So a floor never holds a schedule back more than the debt its
// caller was told of.

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

// Observe brings s to time now: a now earlier than the latest one s has seen
// (Last) is a clock step back, by which the state is moved back (see the top
// of this file). Every operation observes its now (Peek on a copy). Last is
// the time of the latest grant, reset, reconfiguration or step, not of every
// call: a step back smaller than the time since then is not seen as one, and
// costs a caller at most the wait that grant already gave it.
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
// (the state that lost the grants may also have lost their spending). A floor older than FloorAge, or more than 2^52 ns behind
// now, changes nothing.
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
