package wire

// Problem is an RFC 9457 problem detail: the body of every error answer.
type Problem struct {
	Type   string `json:"type"`  // ProblemType(slug), an absolute URN
	Title  string `json:"title"` // Title(slug), the same for every problem of a type
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Field names the one input at fault: a JSON field (a dotted path inside
	// nested objects: "limiter.rate"), a path parameter or a query parameter.
	Field string `json:"field,omitempty"`
	// Redis is, on a problem of Redis (a 503), how Redis stands: one of
	// the values of StreamStatus.Redis ("unavailable", "unauthorized", ...).
	Redis string `json:"redis,omitempty"`
}

// ProblemMediaType is the Content-Type of a Problem.
const ProblemMediaType = "application/problem+json"

// ProblemTypePrefix makes problem types absolute URIs (RFC 9457 §3.1.1)
// without promising a page behind them.
const ProblemTypePrefix = "urn:limitd:problem:"

// The problem types ("slugs"): a Problem's Type is ProblemTypePrefix + slug.
const (
	ProblemInvalid              = "invalid"
	ProblemUnauthorized         = "unauthorized"
	ProblemNotFound             = "not-found"
	ProblemMethodNotAllowed     = "method-not-allowed"
	ProblemConflict             = "conflict"
	ProblemTooLarge             = "too-large"
	ProblemUnsupportedMediaType = "unsupported-media-type"
	ProblemClientClosed         = "client-closed"
	ProblemInternal             = "internal"
	ProblemUnavailable          = "unavailable"
	// ProblemRedisUnauthorized is the 503 of a Redis that refused limitd's
	// credentials (WRONGPASS, NOAUTH) or its user's permissions (NOPERM).
	ProblemRedisUnauthorized = "redis-unauthorized"
	// ProblemRedisLoading is the 503 of a Redis loading its dataset.
	ProblemRedisLoading = "redis-loading"
	// ProblemRedisReadOnly is the 503 of a Redis that is a read-only replica.
	ProblemRedisReadOnly = "redis-read-only"
	ProblemTimeout       = "timeout"
	ProblemBodyTimeout   = "body-timeout"
	// ProblemCrossOrigin is the 403 of a write a browser sent from a page
	// of another origin to a route that needs no token.
	ProblemCrossOrigin = "cross-origin"
	// ProblemMisdirected is the 421 of a request to a route that needs no
	// token, on a loopback address under a non-loopback name (DNS rebinding).
	ProblemMisdirected = "misdirected"
	// ProblemTooManyStreams is the 503 of an event stream past the cap.
	ProblemTooManyStreams = "too-many-streams"
	// ProblemShuttingDown is the 503 of an event stream opened at shutdown.
	ProblemShuttingDown = "shutting-down"
	// ProblemRateLimited is the 429 of limitd's HTTP middleware, which
	// refuses a request over its limit.
	ProblemRateLimited = "rate-limited"
)

var titles = map[string]string{
	ProblemInvalid:              "Bad input",
	ProblemUnauthorized:         "Missing or wrong token",
	ProblemNotFound:             "Not found",
	ProblemMethodNotAllowed:     "Method not allowed",
	ProblemConflict:             "Conflict",
	ProblemTooLarge:             "Request body too large",
	ProblemUnsupportedMediaType: "Unsupported media type",
	ProblemClientClosed:         "Client closed the request",
	ProblemInternal:             "Internal error",
	ProblemUnavailable:          "Redis unavailable",
	ProblemRedisUnauthorized:    "Redis refused limitd's credentials",
	ProblemRedisLoading:         "Redis is loading its data",
	ProblemRedisReadOnly:        "Redis is read-only",
	ProblemTimeout:              "Request timed out",
	ProblemBodyTimeout:          "Request body too slow",
	ProblemCrossOrigin:          "Cross-origin write refused",
	ProblemMisdirected:          "Host not served here",
	ProblemTooManyStreams:       "Too many event streams",
	ProblemShuttingDown:         "Shutting down",
	ProblemRateLimited:          "Too many requests",
}

// ProblemType is the Type of a problem of slug.
func ProblemType(slug string) string { return ProblemTypePrefix + slug }

// Title is the Title of a problem of slug ("" for an unknown slug).
func Title(slug string) string { return titles[slug] }

// NewProblem returns the problem of slug with its type and title.
func NewProblem(status int, slug, detail string) Problem {
	return Problem{Type: ProblemType(slug), Title: Title(slug), Status: status, Detail: detail}
}
