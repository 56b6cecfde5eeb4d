package client

// Fetching reports whether a grant is on its way to l's pool.
func Fetching(l *Limiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fetching != nil
}

// ShareWaiting is the number of gauge callers in s's Acquire.
func ShareWaiting(s *Share) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// Retrying reports whether l's retry loop runs: while it does not wait for
// a retry in flight, it sleeps on a timer of the client's clock.
func Retrying(l *Limiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.retrying
}
