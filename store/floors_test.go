package store

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
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
	f.lower("a", 102*us, 120*us) // a rewinding hand-back
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
	if fus, fah := f.args("a"); fus != (102*us-step)/1000 || fah != 10*us {
		t.Errorf("args %d %d", fus, fah)
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
				f.args(name)
				if i%97 == 0 {
					f.forget(name)
				}
			}
		}()
	}
	wg.Wait()
}
