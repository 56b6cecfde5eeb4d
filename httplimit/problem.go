package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/limitd/limitd/wire"
)

// sfString writes s as a structured-field string (RFC 8941 §3.3.3): quoted,
// with '"' and '\' escaped and anything outside printable ASCII dropped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeProblem answers with an RFC 9457 problem of limitd's types
// (wire.ProblemType(slug)); the title says what the middleware, not limitd's
// server, could not do.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string) {
	body, _ := json.Marshal(wire.Problem{Type: wire.ProblemType(slug), Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", wire.ProblemMediaType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
