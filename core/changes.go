package core

import (
	"context"
	"strconv"
	"strings"
)

// Change is one published config change: a limiter put or patched (its new
// version), deleted (Version 0), or the templates changed (Templates).
type Change struct {
	Limiter   string `json:"limiter,omitempty"`
	Version   int64  `json:"version"`
	Templates bool   `json:"templates,omitempty"`
}

// Changes delivers config changes as they are published until ctx ends,
// then closes. Changes published while Redis is unreachable are lost.
func (s *Service) Changes(ctx context.Context) <-chan Change {
	in := s.store.Changes(ctx)
	out := make(chan Change)
	go func() {
		defer close(out)
		for msg := range in {
			name, v, ok := strings.Cut(msg, " ")
			if !ok {
				continue
			}
			version, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			c := Change{Limiter: name, Version: version}
			if name == "*template*" {
				c = Change{Templates: true}
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
