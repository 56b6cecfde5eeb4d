package limiter

import "strconv"

// Validate reports whether c is a valid config; the error names the field.
func (c Config) Validate() error {
	_, _, err := c.Normalize()
	return err
}

// MaxPermits is the largest n with Cost(n, Den-1) ≤ Horizon: the most permits
// one request may ask for.
func (s Slice) MaxPermits() int64 { return s.permitsWithin(Horizon) }

// FormatRate formats a rate so that ParseRate gives the same float64 back.
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }
