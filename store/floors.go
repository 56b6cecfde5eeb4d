package store

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Floors: what keeps a failover or an empty restart from rewinding a
// schedule (lua/lib.lua, "Floors"; limiter/floor.go), one per name.

// DefaultFloorCap is how many names' floors a store keeps by default. When
// full, the names whose positions lie furthest back are forgotten first: a
// floor only matters while it is ahead of what a rewound state could hold.
const DefaultFloorCap = 1 << 16

const floorShards = 16

type floorSet struct {
	seed   maphash.Seed
	perCap int
	shards [floorShards]floorShard
	binary atomic.Bool // the server reads floors in binary (see floorBinary)
}

type floorShard struct {
	mu sync.Mutex
	m  map[string]limiter.Floor
}

func (f *floorSet) setCap(n int) {
	f.perCap = max(0, (n+floorShards-1)/floorShards)
}

func (f *floorSet) shard(name string) *floorShard {
	return &f.shards[maphash.String(f.seed, name)%floorShards]
}

func (f *floorSet) get(name string) (limiter.Floor, bool) {
	if f.perCap == 0 {
		return limiter.Floor{}, false
	}
	sh := f.shard(name)
	sh.mu.Lock()
	fl, ok := sh.m[name]
	sh.mu.Unlock()
	return fl, ok
}

const (
	// floorAheadOffset is added to a floor's ahead so that it is never
	// negative: lua/lib.lua's FAR, below which the scripts clamp it.
	floorAheadOffset = 1 << 52
	// floorWidth is a floor's hexadecimal digits (lua/lib.lua FLOOR_WIDTH):
	// 14 for the µs it was seen, 14 for its ahead plus floorAheadOffset.
	floorWidth = 28
	noFloors   = "0" // the argument of a call whose limiters have none
	// Binary floors, once an answer came in binary (docs/kinds.md): a call's
	// floors are floorBinary and floorBinWidth bytes per limiter, the µs seen
	// and the ahead plus floorAheadOffset as little-endian int64s.
	floorBinary   = 'B'
	floorBinWidth = 16
)

func (f *floorSet) useBinary() {
	if !f.binary.Load() {
		f.binary.Store(true)
	}
}

// startFloors starts a call's floors in the form the server reads.
func (f *floorSet) startFloors(b []byte) []byte {
	if f.binary.Load() {
		return append(b, floorBinary)
	}
	return b
}

// appendFloor appends name's floor as the scripts read it: its µs seen and
// its ahead (clamped, plus floorAheadOffset), or zeros where there is none;
// ok reports whether there was one.
func (f *floorSet) appendFloor(b []byte, name string) (_ []byte, ok bool) {
	bin := len(b) > 0 && b[0] == floorBinary // startFloors chose the form
	fl, ok := f.get(name)
	if !ok || fl.Seen/1000 <= 0 {
		if bin {
			return append(b, zeroBinFloor[:]...), false
		}
		return append(b, zeroFloor...), false
	}
	ahead := min(max(fl.Ahead, -floorAheadOffset), 2*limiter.Horizon) + floorAheadOffset
	if bin {
		return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(b, uint64(fl.Seen/1000)), uint64(ahead)), true
	}
	return appendHex(appendHex(b, uint64(fl.Seen/1000)), uint64(ahead)), true
}

const zeroFloor = "0000000000000000000000000000"

var zeroBinFloor [floorBinWidth]byte

// appendHex appends v in floorWidth/2 lowercase hexadecimal digits.
func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := floorWidth/2 - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*i)&15])
	}
	return b
}

// floorArg is name's floor as the one floor of a call, or noFloors.
func (f *floorSet) floorArg(name string) string {
	var buf [floorWidth]byte
	b, ok := f.appendFloor(f.startFloors(buf[:0]), name)
	if !ok {
		return noFloors
	}
	return string(b)
}

// stepSlack is how much earlier than the floor kept an answer's Redis time
// must be to count as a clock step back; less is concurrent answers arriving
// out of order, and the earlier ones must not lower the floor.
const stepSlack = int64(time.Second)

// see records that name's schedule stood at pos at Redis time now (whole
// µs). The furthest position is kept; an answer from a clock more than
// stepSlack earlier (Redis time stepped back) replaces it, as the script has
// re-anchored the old floor at its now and the answer says where that left
// the schedule.
func (f *floorSet) see(name string, now, pos int64) {
	f.put(name, now, pos, false)
}

// put is see; with force, pos is kept whatever the floor (a rewound schedule).
func (f *floorSet) put(name string, now, pos int64, force bool) {
	if f.perCap == 0 {
		return
	}
	sh := f.shard(name)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, ok := sh.m[name]
	if ok && !force && now > old.Seen-stepSlack && pos <= old.Seen+old.Ahead {
		return
	}
	if !ok {
		if sh.m == nil {
			sh.m = make(map[string]limiter.Floor)
		}
		if len(sh.m) >= f.perCap {
			sh.evict(f.perCap / 2)
		}
	}
	sh.m[name] = limiter.Floor{Seen: now, Ahead: pos - now}
}

// forget drops name's floor (the limiter was deleted or replaced by one of
// another kind).
func (f *floorSet) forget(name string) {
	if f.perCap == 0 {
		return
	}
	sh := f.shard(name)
	sh.mu.Lock()
	delete(sh.m, name)
	sh.mu.Unlock()
}

// evict keeps the keep floors whose positions lie furthest ahead. Called
// with sh.mu held; its cost, a sort, is paid once per cap/2 new names.
func (sh *floorShard) evict(keep int) {
	pos := make([]int64, 0, len(sh.m))
	for _, fl := range sh.m {
		pos = append(pos, fl.Seen+fl.Ahead)
	}
	slices.Sort(pos)
	cut := pos[len(pos)-keep-1] // positions ≤ cut go (ties may take a few more)
	if keep == 0 {
		cut = pos[len(pos)-1]
	}
	for name, fl := range sh.m {
		if fl.Seen+fl.Ahead <= cut {
			delete(sh.m, name)
		}
	}
}
