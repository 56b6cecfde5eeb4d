package httplimit

import (
	"container/list"
	"sync"

	"github.com/limitd/limitd/client"
)

// keyedLimits is the middleware's state: the handles of recent keys.
type keyedLimits struct {
	c   *client.Client
	cfg middlewareConfig

	mu       sync.Mutex
	byKey    map[string]*list.Element // of *keyedHandle
	lru      list.List
	draining map[string]*keyedHandle // evicted but in use: closed by the last user
}

type keyedHandle struct {
	name    string
	l       *client.Limiter
	refs    int  // requests using l now
	evicted bool // out of the LRU: the last request using l closes it
}

func newKeyedLimits(c *client.Client, opts []Option) *keyedLimits {
	cfg := middlewareConfig{key: remoteIP, policy: "default", maxKeys: 10000}
	for _, o := range opts {
		o(&cfg)
	}
	return &keyedLimits{c: c, cfg: cfg, byKey: map[string]*list.Element{}, draining: map[string]*keyedHandle{}}
}

// acquire returns the key's handle for one request; release gives it back.
func (m *keyedLimits) acquire(name string) (*keyedHandle, error) {
	m.mu.Lock()
	kh, idle := m.lookup(name)
	m.mu.Unlock()
	if kh == nil {
		l, err := m.c.Limiter(name)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		// Another request may have come first, or the handle may have been
		// evicted meanwhile: c.Limiter then returned that one's handle.
		if kh, idle = m.lookup(name); kh == nil {
			kh = &keyedHandle{name: name, l: l, refs: 1}
			m.byKey[name] = m.lru.PushFront(kh)
			idle = m.evict()
		}
		m.mu.Unlock()
	}
	for _, old := range idle {
		_ = old.Close() // hands its permits back; failures only lose them
	}
	return kh, nil
}

// lookup finds the key's handle in the LRU or among the evicted ones still
// in use (bringing it back), and counts one more user; nil if there is none.
// It returns the handles to close that bringing one back evicted.
func (m *keyedLimits) lookup(name string) (*keyedHandle, []*client.Limiter) {
	if e, ok := m.byKey[name]; ok {
		m.lru.MoveToFront(e)
		kh := e.Value.(*keyedHandle)
		kh.refs++
		return kh, nil
	}
	kh, ok := m.draining[name]
	if !ok {
		return nil, nil
	}
	delete(m.draining, name)
	kh.evicted = false
	kh.refs++
	m.byKey[name] = m.lru.PushFront(kh)
	return kh, m.evict()
}

// evict removes the least recently used handles beyond the bound and returns
// those nobody uses, to be closed; the others are closed by their last user.
func (m *keyedLimits) evict() []*client.Limiter {
	var idle []*client.Limiter
	for m.lru.Len() > m.cfg.maxKeys {
		old := m.lru.Remove(m.lru.Back()).(*keyedHandle)
		delete(m.byKey, old.name)
		old.evicted = true
		if old.refs == 0 {
			idle = append(idle, old.l)
		} else {
			m.draining[old.name] = old
		}
	}
	return idle
}

// release ends a request's use of a handle. The last user of an evicted one
// closes it; a handle found closed (by another user of the client: handles are
// shared by name) is forgotten.
func (m *keyedLimits) release(kh *keyedHandle, closed bool) {
	m.mu.Lock()
	kh.refs--
	if closed && !kh.evicted {
		kh.evicted = true
		if e, ok := m.byKey[kh.name]; ok && e.Value.(*keyedHandle) == kh {
			m.lru.Remove(e)
			delete(m.byKey, kh.name)
		}
	}
	last := kh.evicted && kh.refs == 0
	if last && m.draining[kh.name] == kh {
		delete(m.draining, kh.name)
	}
	m.mu.Unlock()
	if last && !closed {
		_ = kh.l.Close()
	}
}
