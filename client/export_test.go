package client

// Fetching reports whether a grant is on its way to l's pool.
func Fetching(l *Limiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fetching != nil
}
