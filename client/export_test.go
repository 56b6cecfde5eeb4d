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
