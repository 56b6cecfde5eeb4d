package client

// ShareOption configures a Share.
type ShareOption func(*shareOptions)

type shareOptions struct {
	clientID    string
	wants       float64 // < 0: estimated
	priority    float64
	fallback    Fallback
	hasFallback bool
}

// WithClientID sets the id the share asks under (default
// hostname-pid-random). Two shares with the same id on the same limiter are
// one client to it: give each process, and each share in it, its own id.
func WithClientID(id string) ShareOption { return func(o *shareOptions) { o.clientID = id } }

// WithWants sets what the share asks for instead of estimating it.
func WithWants(w float64) ShareOption { return func(o *shareOptions) { o.wants = w } }

// WithPriority sets the weight of the share's claim (default 1): it counts
// as that many clients in the algorithm's equal shares, so that of two
// clients wanting all of the capacity, one with priority 2 gets two thirds.
func WithPriority(p float64) ShareOption { return func(o *shareOptions) { o.priority = p } }

// WithShareFallback sets the share's fallback mode, overriding the client's.
func WithShareFallback(f Fallback) ShareOption {
	return func(o *shareOptions) { o.fallback, o.hasFallback = f, true }
}
