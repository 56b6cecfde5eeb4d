package store

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// TestFloorSet: the furthest position is kept, a rewinding hand-back lowers
// it, an answer from a clock stepped back replaces it (one merely out of
// order does not), forget drops it, and the
// set keeps at most its cap, dropping the positions furthest back.
func TestFloorSet(t *testing.T) {
	var f floorSet
	f.seed = maphash.MakeSeed()
	f.setCap(1600)
	const us = int64(1000)
	f.see("a", 100*us, 150*us)
	f.see("a", 101*us, 140*us) // behind the kept one: ignored
	if fl, _ := f.get("a"); fl.Seen+fl.Ahead != 150*us {
		t.Errorf("furthest: %+v", fl)
	}
	f.put("a", 102*us, 120*us, true) // a rewinding hand-back
	if fl, _ := f.get("a"); fl.Seen+fl.Ahead != 120*us {
		t.Errorf("after a rewind: %+v", fl)
	}
	// An answer a little earlier and behind: another caller's, arriving out
	// of order. It must not lower the floor.
	f.see("a", 102*us-stepSlack/2, 110*us)
	if fl, _ := f.get("a"); fl.Seen+fl.Ahead != 120*us {
		t.Errorf("an out-of-order answer lowered the floor: %+v", fl)
	}
	step := 2 * stepSlack
	f.see("a", 102*us-step, 102*us-step+10*us) // the clock stepped back: the new answer rules
	if fl, _ := f.get("a"); fl.Seen != 102*us-step || fl.Ahead != 10*us {
		t.Errorf("after a step back: %+v", fl)
	}
	const t0 = int64(1_764_000_000_123_456_789) // a Unix time in ns
	f.see("b", t0, t0+10*us)
	if got, want := f.floorArg("b"), fmt.Sprintf("%014x%014x", t0/1000, 10*us+floorAheadOffset); got != want {
		t.Errorf("floor argument %s, want %s", got, want)
	}
	f.see("c", t0, t0-2*floorAheadOffset) // further back than the scripts take: clamped
	f.see("d", t0, t0+4*limiter.Horizon)
	if got, want := f.floorArg("c"), fmt.Sprintf("%014x%014x", t0/1000, 0); got != want {
		t.Errorf("floor argument far behind %s, want %s", got, want)
	}
	if got, want := f.floorArg("d"), fmt.Sprintf("%014x%014x", t0/1000, 2*limiter.Horizon+floorAheadOffset); got != want {
		t.Errorf("floor argument far ahead %s, want %s", got, want)
	}
	if got := f.floorArg("none"); got != noFloors {
		t.Errorf("floor argument of a name without one: %q", got)
	}
	if b, ok := f.appendFloor(nil, "none"); ok || string(b) != zeroFloor || len(b) != floorWidth {
		t.Errorf("a missing floor among others: %q %v", b, ok)
	}
	// Once a binary answer came: 'B', then the two as little-endian int64s.
	f.useBinary()
	want := append([]byte{floorBinary}, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(t0/1000)), uint64(10*us+floorAheadOffset))...)
	if got := f.floorArg("b"); got != string(want) {
		t.Errorf("binary floor argument %q, want %q", got, want)
	}
	if b, ok := f.appendFloor(f.startFloors(nil), "none"); ok || len(b) != 1+floorBinWidth || string(b[1:]) != string(make([]byte, floorBinWidth)) {
		t.Errorf("a missing binary floor among others: %q %v", b, ok)
	}
	f.forget("a")
	if _, ok := f.get("a"); ok {
		t.Errorf("forgotten floor still there")
	}
	for i := range 100_000 {
		f.see(fmt.Sprint("n", i), 0, int64(i))
	}
	if n := f.len(); n > 1600 || n < 400 {
		t.Errorf("%d floors kept, cap 1600", n)
	}
	// The last names (furthest positions) survive eviction.
	for i := 100_000 - 50; i < 100_000; i++ {
		if _, ok := f.get(fmt.Sprint("n", i)); !ok {
			t.Fatalf("floor of n%d (one of the furthest) evicted", i)
		}
	}
	var off floorSet
	off.seed = maphash.MakeSeed()
	off.see("x", 1, 2)
	if _, ok := off.get("x"); ok || off.len() != 0 {
		t.Errorf("a set with cap 0 keeps floors")
	}
	// Concurrent use (go test -race).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				name := fmt.Sprint("c", i%300)
				f.see(name, int64(i), int64(i+g))
				f.floorArg(name)
				if i%97 == 0 {
					f.forget(name)
				}
			}
		}()
	}
	wg.Wait()
}
