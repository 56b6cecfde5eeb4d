package client

import (
	"context"
	"slices"
	"time"

	"github.com/limitd/limitd"
)

// Hand-back: permits a handle will not use go back to the shared schedule.

// changed reacts to a published config change: permits granted under older
// versions are handed back at once, so no permit at the old rate is used.
func (l *Limiter) changed(version int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mayChange()
	if version > 0 {
		l.missingUntil = 0 // made (again): ask for it at once
	}
	switch {
	case l.closed:
	case version == 0: // deleted: nothing granted by it may be used
		l.dropLost()
		l.version = 0
	case version > l.version:
		l.dropOlder(version)
	}
}

func (l *Limiter) dropOlder(version int64) {
	l.version = version
	kept := l.blocks[:0]
	for _, b := range l.blocks {
		if b.g.Version < version {
			l.handBack(b)
		} else {
			kept = append(kept, b)
		}
	}
	clear(l.blocks[len(kept):])
	l.blocks = kept
	back := l.back[:0]
	for _, s := range l.back {
		if s.b.g.Version < version {
			l.bg.Go(func() { _ = l.releaseOne(s.b.g) })
		} else {
			back = append(back, s)
		}
	}
	l.back = back
}

// dropLost empties the pool without handing anything back: the limiter the
// permits came from is gone, and a hand-back would land on a limiter
// re-created under the same name and corrupt its totals.
func (l *Limiter) dropLost() {
	for _, b := range l.blocks {
		b.dropped, b.lost = true, true
	}
	for _, s := range l.back {
		s.b.dropped, s.b.lost = true, true
	}
	l.blocks, l.back = nil, nil
}

// handBack releases a block's undispensed permits in the background. The
// next fetch waits for it (see handing): a hand-back rewinds the schedule
// only while nothing was granted after the block, and a grant that got
// there first would be placed after permits nobody uses, in the future.
func (l *Limiter) handBack(b *block) {
	b.dropped = true
	if m := b.left(); m > 0 {
		b.i = b.g.Permits
		done := make(chan struct{})
		l.handing = append(slices.DeleteFunc(l.handing, closed), done)
		l.bg.Go(func() {
			defer close(done)
			_ = l.release(b.g, m)
		})
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (l *Limiter) release(g limitd.Grant, m int64) error {
	l.remoteCalls.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return l.c.t.Release(ctx, g, m)
}

// releaseOne hands back one permit from the middle of a grant (put back by a
// cancelled wait, never reused) as of no current version, so that its time
// becomes idle: a rewind would free a start that another permit used.
func (l *Limiter) releaseOne(g limitd.Grant) error {
	g.Version = -1
	return l.release(g, 1)
}
