package wire

// Signals are what one limiter did over the last sample interval and where
// it stands, as the live view samples every named limiter once a second:
// the "signals" of an event stream's "state" event, and the items of GET
// /v1/history. Rates are per second over the interval since the sample
// before (decision totals read from Redis, so every limitd sharing it
// answers the same).
type Signals struct {
	T                int64   `json:"t_ns"` // when it was sampled, Redis time, Unix ns
	GrantedPerS      float64 `json:"granted_per_s"`
	GrantedCallsPerS float64 `json:"granted_calls_per_s"`
	RefusedPerS      float64 `json:"refused_per_s"`
	RefusedCallsPerS float64 `json:"refused_calls_per_s"`
	Utilization      float64 `json:"utilization"` // see the README: per kind
	Wait             int64   `json:"wait_ns"`     // how long a new caller asking 1 permit would wait now
	Saturated        bool    `json:"saturated"`   // refused or queueing callers (a rate limiter: a wait beyond two permits' pace), or utilization ≥ 0.95
}

// LimiterEvent is an event stream's "state" event: the limiter's view, and
// its last signals once it was sampled.
type LimiterEvent struct {
	Limiter
	Signals *Signals `json:"signals,omitempty"`
}

// History is GET /v1/history: each limiter's signals, oldest first, one
// every Step ns.
type History struct {
	Step     int64                `json:"step_ns"`
	Limiters map[string][]Signals `json:"limiters"`
}

// StreamStatus is an event stream's "status" event: how this limitd stands,
// sent on connect and on every change.
type StreamStatus struct {
	Redis string `json:"redis"` // one of the Redis* values below
	// RedisDetail says, when Redis cannot serve, why and what to fix (the
	// detail of the 503 problems the API answers meanwhile).
	RedisDetail string `json:"redis_detail,omitempty"`
	DataLost    int64  `json:"data_lost_at_ns"`
	Ready       bool   `json:"ready"`
	Limiters    int    `json:"limiters"`
}

// The values of StreamStatus.Redis, and of /readyz's and a Redis problem's
// "redis".
const (
	RedisOK = "ok"
	// RedisEmbedded: serving, from limitd serve's embedded in-memory Redis,
	// which no other process shares.
	RedisEmbedded    = "embedded"
	RedisUnavailable = "unavailable" // down, timed out, ...: any other cause
	// RedisUnauthorized: Redis refused limitd's credentials or permissions.
	RedisUnauthorized = "unauthorized"
	RedisLoading      = "loading"   // Redis is loading its dataset
	RedisReadOnly     = "read-only" // Redis is a read-only replica
)

// RedisServing reports whether a StreamStatus.Redis value means that Redis
// serves.
func RedisServing(v string) bool { return v == RedisOK || v == RedisEmbedded }

// Ready is the body of GET /readyz while limitd is ready: "status" is
// "ready", "redis" RedisOK or RedisEmbedded.
type Ready struct {
	Status string `json:"status"`
	Redis  string `json:"redis"`
}
