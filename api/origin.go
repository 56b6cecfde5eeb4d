package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/wire"
)

// untokened is the middleware of every route that needs no token. Without a
// token any page the user opens could send requests through the browser, so
// such a request is refused as docs/http.md ("Browsers") tells: on a
// loopback address under a non-loopback Host (421: DNS rebinding), a write
// from another origin (403), or a body not declared JSON (415: a page may
// send no JSON without asking first). Reads pass: limitd sends no CORS
// headers, so another origin cannot read the answers.
func untokened(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if p := misdirected(r); p != nil {
			return p
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return next(c)
		}
		if p := crossOrigin(r); p != nil {
			return p
		}
		if hasBody(r) {
			if ct := r.Header.Get(echo.HeaderContentType); !jsonMediaType(ct) {
				return notJSON(ct)
			}
		}
		return next(c)
	}
}

// noTokenRule ends the details of untokened's problems.
const noTokenRule = "limitd without tokens (LIMITD_TOKEN, LIMITD_ADMIN_TOKEN) takes such requests only from its own pages and from clients that are not browsers"

// misdirected is the 421 of a request that reached a loopback address under
// a name that does not stay on this machine, nil for any other.
func misdirected(r *http.Request) *problem {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || !local.IP.IsLoopback() || loopbackHost(r.Host) {
		return nil
	}
	return newProblem(http.StatusMisdirectedRequest, wire.ProblemMisdirected, fmt.Sprintf(
		"Host %s is not a loopback name: a request that reaches limitd on a loopback address must name it 127.0.0.1, [::1] or localhost "+
			"(a page on another site could reach it under its own name through DNS rebinding); "+
			"a proxy in front of limitd must send one of those as Host, or limitd needs tokens (LIMITD_TOKEN; for /metrics LIMITD_METRICS_TOKEN)", quote(r.Host)))
}

// loopbackHost reports whether a Host header names this machine whatever
// the DNS says: a loopback address, localhost or a name under .localhost
// (which resolvers and browsers keep on loopback, RFC 6761). An empty Host
// (HTTP/1.0) is not a browser's.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // [::1] without a port
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// crossOriginCheck is Go's check of Sec-Fetch-Site and Origin: safe methods
// pass, as do requests with neither header (not a browser's).
var crossOriginCheck = http.NewCrossOriginProtection()

// crossOrigin is the 403 of a request a browser sent from a page of another
// origin, naming the header that says so; nil for any other.
func crossOrigin(r *http.Request) *problem {
	if crossOriginCheck.Check(r) == nil {
		return nil
	}
	var detail string
	// Check looks at Origin only when Sec-Fetch-Site is absent.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		detail = fmt.Sprintf("Sec-Fetch-Site %s: the browser says a page of another origin sent this %s; %s",
			quote(site), clip(r.Method), noTokenRule)
	} else {
		detail = fmt.Sprintf("Origin %s is not this server's (Host %s): a page of another origin sent this %s; %s",
			quote(r.Header.Get("Origin")), quote(r.Host), clip(r.Method), noTokenRule)
	}
	return newProblem(http.StatusForbidden, wire.ProblemCrossOrigin, detail)
}

// jsonMediaType reports whether a Content-Type is JSON: application/json or
// application/*+json (merge-patch+json, problem+json), with any parameters.
func jsonMediaType(ct string) bool {
	if ct == echo.MIMEApplicationJSON {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notJSON is the 415 of a body whose Content-Type (ct, maybe "") is not JSON.
func notJSON(ct string) *problem {
	what := "Content-Type " + quote(ct) + " is not JSON"
	if ct == "" {
		what = "a request body needs a Content-Type"
	}
	return newProblem(http.StatusUnsupportedMediaType, wire.ProblemUnsupportedMediaType,
		what+"; send Content-Type: application/json")
}
