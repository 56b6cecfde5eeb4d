package wire

// Signals are what one limiter did over its last samples and where it
// stands: the "signals" of an event stream's "state" event, and the items of
// GET /v1/history. Rates are counts over the Redis time between two reads at
// least a few seconds apart (span_ns), never an assumed second: granted
// permits of a rate kind as its state in Redis counts them (every path),
// refusals and calls as the totals every front end adds. The fields after
// "health" are the kind's reading, present for the kinds they apply to, and
// only in the newest signals.
type Signals struct {
	T                int64   `json:"t_ns"` // when it was sampled, Redis time, Unix ns
	Span             int64   `json:"span_ns,omitempty"`
	GrantedPerS      float64 `json:"granted_per_s"`
	GrantedCallsPerS float64 `json:"granted_calls_per_s"`
	RefusedPerS      float64 `json:"refused_per_s"`
	RefusedCallsPerS float64 `json:"refused_calls_per_s"`
	// ShadowRefusedPerS is what a limiter in shadow mode would have refused
	// a second (it refused nobody: refused_per_s stays 0).
	ShadowRefusedPerS float64 `json:"shadow_refused_per_s"`
	Utilization       float64 `json:"utilization"` // see the README: per kind
	Wait              int64   `json:"wait_ns"`     // how long a new caller asking 1 permit would wait now (a lease kind: 0)
	Saturated         bool    `json:"saturated"`   // refused or queueing callers (a rate limiter: a wait beyond two permits' pace), or utilization ≥ 0.95
	Shadow            bool    `json:"shadow,omitempty"`
	// Health is "ok", "refusing", "saturated" or "would_refuse" (shadow
	// mode: refusing nobody), as the shipped alerts decide it.
	Health string `json:"health,omitempty"`

	// A rate kind's total permits granted, as its state counts them.
	Permits *int64 `json:"permits,omitempty"`
	// A scheduled kind's backlog (schedule: time nobody claimed; smooth:
	// stored time) and the lateness of its grants added up.
	Backlog       *int64 `json:"backlog_ns,omitempty"`
	LatenessTotal *int64 `json:"lateness_total_ns,omitempty"`
	// A window's limit, permits left and the end of its window; a
	// concurrency limiter's limit, slots in use and free, and the earliest
	// lease expiry (a slot frees when its holder releases it, usually
	// sooner).
	Limit      *int64 `json:"limit,omitempty"`
	Remaining  *int64 `json:"remaining,omitempty"`
	ResetAt    *int64 `json:"reset_at_ns,omitempty"`
	InUse      *int64 `json:"in_use,omitempty"`
	Free       *int64 `json:"free,omitempty"`
	NextExpiry *int64 `json:"next_expiry_ns,omitempty"`
	// A share limiter's capacity held by its holders, what they want in
	// all, and its capacity.
	Held     *float64 `json:"held,omitempty"`
	Wanted   *float64 `json:"wanted,omitempty"`
	Capacity *float64 `json:"capacity,omitempty"`
	// A template instance's decisions, counted under its template.
	Instance *InstanceCounts `json:"instance,omitempty"`
}

// InstanceCounts are a template instance's decisions as its template's
// busiest-instances sets hold them (GET /v1/templates/{id}/top) since
// since_ns; tracked is false when it is not among the busiest, and its
// counts are then not known.
type InstanceCounts struct {
	Template string `json:"template"`
	Since    int64  `json:"since_ns"`
	Tracked  bool   `json:"tracked"`
	Granted  int64  `json:"granted"`
	Refused  int64  `json:"refused"`
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
