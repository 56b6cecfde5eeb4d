package api

import (
	"log/slog"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// audit logs a config change at info: what changed, its versions before and
// after when known (0 before a creation), and who asked (the kind of token
// that authorized it, and the client's address).
func (s *server) audit(c echo.Context, op, kind, name string, versions ...int64) {
	attrs := []slog.Attr{slog.String("op", op), slog.String(kind, name)}
	if len(versions) == 2 {
		attrs = append(attrs, slog.Int64("version_before", versions[0]), slog.Int64("version_after", versions[1]))
	}
	attrs = append(attrs, slog.String("by", s.changer), slog.String("addr", c.RealIP()),
		slog.String("request_id", requestID(c)))
	s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "config change", attrs...)
}

// changerOf names who may change configs: the admin token's holder, the
// token's (no admin token), or anyone (neither).
func changerOf(o Options) string {
	switch {
	case o.AdminToken != "":
		return "admin-token"
	case o.Token != "":
		return "token"
	}
	return "anyone"
}

// failureWindow is how often at most a run of the same failure (a Redis
// outage answering 503 to every request) is logged: its first request, then
// a line per window saying how many more there were.
const failureWindow = 10 * time.Second

// failureLog decides which of a run of failures is logged.
type failureLog struct {
	mu   sync.Mutex
	last map[string]time.Time // when a failure of this problem was last logged
	more map[string]int       // failures of it since, not logged
}

// log reports whether a failure of problem at now is logged, and how many
// of it were left out since the last one that was.
func (f *failureLog) log(problem string, now time.Time) (ok bool, leftOut int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last, f.more = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := f.last[problem]; seen && now.Sub(t) < failureWindow {
		f.more[problem]++
		return false, 0
	}
	leftOut = f.more[problem]
	f.last[problem], f.more[problem] = now, 0
	return true, leftOut
}
