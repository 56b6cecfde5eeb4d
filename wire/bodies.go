package wire

import (
	"encoding/json"

	"github.com/limitd/limitd/limiter"
)

// Every time below is Redis time in Unix ns, every delay ns; durations in
// requests are Go duration strings (limiter.Duration).

// AcquireRequest is the body of POST /v1/limiters/{name}/acquire; every field
// is optional. A concurrency limiter's acquire takes none of them.
type AcquireRequest struct {
	Permits *int64            `json:"permits,omitempty"`  // default 1
	MaxWait *limiter.Duration `json:"max_wait,omitempty"` // default unlimited; negative is 0
	Block   *bool             `json:"block,omitempty"`    // wait out the delay before answering
}

// Granted is a granted acquire of permits (200).
type Granted struct {
	Granted   bool  `json:"granted"`
	Permits   int64 `json:"permits"`
	Delay     int64 `json:"delay_ns"`
	Scheduled int64 `json:"scheduled_ns"`
	Start     int64 `json:"start_ns"`
	Lateness  int64 `json:"lateness_ns"`
	Wait      int64 `json:"wait_ns"`
	Version   int64 `json:"version"`
	Now       int64 `json:"now_ns"`
}

// Denied is an acquire or grant of permits not granted within max_wait (429).
type Denied struct {
	Granted    bool  `json:"granted"`
	RetryAfter int64 `json:"retry_after_ns"`
	Delay      int64 `json:"delay_ns"`
	Wait       int64 `json:"wait_ns"`
	Version    int64 `json:"version"`
	Now        int64 `json:"now_ns"`
}

// Window is what the answers of a window limiter add: its permits per
// window, those left, the time until its window resets (never 0) and that
// end. Its wait_ns is then 0: a window has no backlog.
type Window struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset_ns"`
	ResetAt   int64 `json:"reset_at_ns"`
}

// WindowGranted is a granted acquire of a window limiter (200).
type WindowGranted struct {
	Granted
	Window
}

// WindowDenied is a refused acquire of a window limiter (429).
type WindowDenied struct {
	Denied
	Window
}

// AppendJSON appends g's JSON, as json.Marshal writes it, to b.
func (g WindowGranted) AppendJSON(b []byte) []byte { return g.Window.extend(g.Granted.AppendJSON(b)) }

// AppendJSON appends d's JSON, as json.Marshal writes it, to b.
func (d WindowDenied) AppendJSON(b []byte) []byte { return d.Window.extend(d.Denied.AppendJSON(b)) }

// GrantRequest is the body of POST .../grant.
type GrantRequest struct {
	Permits *int64            `json:"permits"`            // required, ≥ 1
	MaxWait *limiter.Duration `json:"max_wait,omitempty"` // default unlimited; negative is 0
}

// Slice is a limiter.Slice: whole + frac/den ns per permit.
type Slice struct {
	Whole int64 `json:"whole"`
	Frac  int64 `json:"frac"`
	Den   int64 `json:"den"`
}

// Grant is a granted POST .../grant, and the grant a handback names.
type Grant struct {
	// ID is the grant's handle for its handback: an opaque token that
	// carries what a handback needs, so any replica accepts it.
	ID        string        `json:"id"`
	Granted   bool          `json:"granted"`
	Permits   int64         `json:"permits"`
	Scheduled int64         `json:"scheduled_ns"`
	Start     int64         `json:"start_ns"`
	Delay     int64         `json:"delay_ns"`
	Lateness  int64         `json:"lateness_ns"`
	Wait      int64         `json:"wait_ns"`
	Version   int64         `json:"version"`
	Now       int64         `json:"now_ns"`
	Kind      limiter.Kind  `json:"kind"`
	Slice     Slice         `json:"slice"`
	Burst     limiter.Burst `json:"burst"` // a number, or "inf"
	RemBefore int64         `json:"rem_before"`
	End       int64         `json:"end_ns"`
}

// HandbackRequest is the body of POST .../handback.
type HandbackRequest struct {
	Grant   *Grant `json:"grant"`   // as POST .../grant answered it
	Permits *int64 `json:"permits"` // the grant's last permits handed back
}

// Handback answers a handback.
type Handback struct {
	Rewound bool `json:"rewound"`
}

// ChargeRequest is the body of POST .../charge: permits the work used, taken
// whatever is left (0: a check). With grant (as POST .../grant answered it)
// it settles that grant instead: fewer than granted hands the rest back, more
// charges the excess.
type ChargeRequest struct {
	Permits *int64 `json:"permits"` // required, ≥ 0
	Grant   *Grant `json:"grant,omitempty"`
}

// Charged answers a charge (200): the permits it took (a settle: the excess
// it charged), whether they fitted, and the limiter after them (delay_ns,
// and wait_ns, 0 for a window). A settle adds the permits it handed back and
// whether that rewound the schedule.
type Charged struct {
	Permits    int64  `json:"permits"`
	Within     bool   `json:"within"`
	Delay      int64  `json:"delay_ns"`
	Wait       int64  `json:"wait_ns"`
	Version    int64  `json:"version"`
	Now        int64  `json:"now_ns"`
	HandedBack *int64 `json:"handed_back,omitempty"`
	Rewound    *bool  `json:"rewound,omitempty"`
}

// WindowCharged is a charge of a window limiter: its remaining is 0 once
// its count has passed the limit, until reset_ns.
type WindowCharged struct {
	Charged
	Window
}

// CapacityRequest is the body of POST .../capacity; client_id and wants are required.
type CapacityRequest struct {
	ClientID *string  `json:"client_id"`
	Wants    *float64 `json:"wants"`
	Has      *float64 `json:"has,omitempty"`      // default 0
	Priority *float64 `json:"priority,omitempty"` // default 0, which counts as 1
}

// CapacityLease answers a capacity request.
type CapacityLease struct {
	Gets         float64 `json:"gets"`
	Expires      int64   `json:"expires_ns"`
	Refresh      int64   `json:"refresh_ns"`
	SafeCapacity float64 `json:"safe_capacity"`
	Learning     bool    `json:"learning"`
	Version      int64   `json:"version"`
}

// SlotGranted answers a granted concurrency acquire (200).
type SlotGranted struct {
	Granted bool   `json:"granted"`
	LeaseID string `json:"lease_id"`
	Expires int64  `json:"expires_ns"`
	InUse   int64  `json:"in_use"` // slots held, this one included
	Limit   int64  `json:"limit"`
}

// SlotDenied answers a concurrency acquire when every slot is held (429).
type SlotDenied struct {
	Granted    bool  `json:"granted"`
	RetryAfter int64 `json:"retry_after_ns"` // until the earliest lease expires
	InUse      int64 `json:"in_use"`
	Limit      int64 `json:"limit"`
}

// SlotShadowed answers a concurrency acquire that a limiter in shadow mode
// refused and let through (200): no slot was taken, no lease made.
type SlotShadowed struct {
	Granted    bool  `json:"granted"` // true
	Shadow     bool  `json:"shadow"`  // true
	RetryAfter int64 `json:"retry_after_ns"`
	InUse      int64 `json:"in_use"`
	Limit      int64 `json:"limit"`
}

// SlotAnswer reads any answer of POST .../acquire: a slot's (granted or
// not), or a schedule's, which has no in_use.
type SlotAnswer struct {
	LeaseID    *string `json:"lease_id"`
	Shadow     bool    `json:"shadow"` // a SlotShadowed: no lease
	Expires    int64   `json:"expires_ns"`
	RetryAfter int64   `json:"retry_after_ns"`
	InUse      *int64  `json:"in_use"`
	Limit      int64   `json:"limit"`
}

// LeaseRequest is the body of POST .../release and .../renew.
type LeaseRequest struct {
	LeaseID *string `json:"lease_id"`
}

// Renewed answers a renewal.
type Renewed struct {
	LeaseID string `json:"lease_id"`
	Expires int64  `json:"expires_ns"`
}

// Limiter is a limiter as GET, PUT and PATCH answer it; a list leaves out
// State, and so do share and concurrency limiters, which have no schedule.
// A template instance (GET of a name only a template matches) names its
// Template and the remaining TTL of its state (0 while it has none).
type Limiter struct {
	Name     string         `json:"name"`
	Template string         `json:"template,omitempty"`
	TTL      *int64         `json:"ttl_ns,omitempty"` // a template instance's
	Config   limiter.Config `json:"config"`           // canonical: every default filled in
	Version  int64          `json:"version"`
	State    *WaitState     `json:"state,omitempty"` // a rate limiter's
	// Totals are the limiter's decisions, counted by every limitd sharing
	// the Redis (added to Redis about once a second by each); absent for a
	// template instance, whose decisions count under its template.
	Totals *Totals `json:"totals,omitempty"`
	// A share or concurrency limiter's holders now, at Now (Redis time, Unix
	// ns): a share limiter's with Held, the sum of what they have, and
	// Learning; a concurrency limiter's with InUse, the slots they hold.
	Holders  []Holder `json:"holders,omitzero"`
	Held     *float64 `json:"held,omitempty"`
	Wanted   *float64 `json:"wanted,omitempty"` // a share limiter's: what its holders want in all
	Learning *bool    `json:"learning,omitempty"`
	InUse    *int     `json:"in_use,omitempty"`
	Now      int64    `json:"now_ns,omitempty"`
}

// Totals count a limiter's decisions: calls and the permits they asked
// for, granted and refused (a refusal in shadow mode counts as refused:
// it is what would have been refused).
type Totals struct {
	GrantedCalls   int64 `json:"granted_calls"`
	GrantedPermits int64 `json:"granted_permits"`
	RefusedCalls   int64 `json:"refused_calls"`
	RefusedPermits int64 `json:"refused_permits"`
}

// Holder is one lease on a share limiter (ClientID, Has, Wants, Priority)
// or a concurrency limiter (LeaseID), and when it expires (Unix ns).
type Holder struct {
	ClientID string   `json:"client_id,omitempty"`
	LeaseID  string   `json:"lease_id,omitempty"`
	Has      *float64 `json:"has,omitempty"`
	Wants    *float64 `json:"wants,omitempty"`
	Priority *float64 `json:"priority,omitempty"`
	Expires  int64    `json:"expires_ns"`
}

// LimiterList is one page of GET /v1/limiters; Next is "" after the last.
type LimiterList struct {
	Limiters []Limiter `json:"limiters"`
	Next     string    `json:"next"`
}

// WaitState is a limiter's live state, the answer of GET .../wait.
type WaitState struct {
	Wait      int64 `json:"wait_ns"`      // backlog (smooth: stored time)
	Delay     int64 `json:"delay_ns"`     // how long a new caller would wait now
	Idle      int64 `json:"idle_ns"`      // total time forfeited
	Allocated int64 `json:"allocated_ns"` // total time granted
	Now       int64 `json:"now_ns"`       // Redis time, Unix ns
	Version   int64 `json:"version"`
	Permits   int64 `json:"permits"` // total permits granted
	// LatenessTotal is the sum of the lateness of every granted request.
	LatenessTotal int64 `json:"lateness_total_ns"`
	Started       bool  `json:"started"` // false until the first permit
	*Window             // a window limiter's (wait_ns is then 0)
}

// Status is the body of /healthz ("ok") and /readyz ("ready").
type Status struct {
	Status string `json:"status"`
}

// Template is a template as PUT and GET /v1/templates answer it.
type Template struct {
	ID      string            `json:"id"`
	Pattern string            `json:"pattern"`
	Order   int               `json:"order"`
	IdleTTL *limiter.Duration `json:"idle_ttl,omitempty"`
	Limiter limiter.Config    `json:"limiter"`
	Version int64             `json:"version"`
	// Description is what displays call the template instead of its id
	// (an Envoy rule's descriptors: "mongo_cps.database_users").
	Description string `json:"description,omitempty"`
	// FixedWindows: the instances count in a plain counter per window, as
	// the Envoy reference does; set by Envoy rules, not by PUT.
	FixedWindows bool `json:"fixed_windows,omitempty"`
}

// TemplateView is GET /v1/templates/{id}: the template and how many of its
// instances live now, counted exactly or, where Redis holds many keys,
// estimated from a sample (InstancesExact false).
type TemplateView struct {
	Template
	Instances      int64 `json:"instances"`
	InstancesExact bool  `json:"instances_exact"`
}

// TemplateListed is a template in GET /v1/templates (Instances: ?instances=true).
type TemplateListed struct {
	Template
	Instances *int64 `json:"instances,omitempty"`
}

// TemplateList is GET /v1/templates: every template in matching order.
type TemplateList struct {
	Templates []TemplateListed `json:"templates"`
}

// Top is GET /v1/templates/{id}/top: the template's busiest instances by
// refused or granted permits (By) since the oldest minute counted, largest
// first, across every limitd on the Redis.
type Top struct {
	By        string        `json:"by"`
	Since     int64         `json:"since_ns"`
	Instances []TopInstance `json:"instances"`
}

// TopInstance is one instance of a Top: the permits it was refused and
// granted over the minutes counted.
type TopInstance struct {
	Name    string `json:"name"`
	Refused int64  `json:"refused"`
	Granted int64  `json:"granted"`
}

// TemplateRequest is the body of PUT /v1/templates/{id}. id and version are
// accepted so that what GET answered can be PUT back: id must then equal the
// path's, version is read-only and ignored. Limiter is decoded on its own,
// so that a fault in it is named "limiter.<field>".
type TemplateRequest struct {
	ID      *string           `json:"id,omitempty"`
	Pattern string            `json:"pattern"`
	Order   int               `json:"order"`
	IdleTTL *limiter.Duration `json:"idle_ttl,omitempty"`
	Limiter json.RawMessage   `json:"limiter"`
	// Description: see Template.
	Description string `json:"description,omitempty"`
	// Read-only: what GET answers besides the template, ignored, so that a
	// template read can be put back as it is (only Envoy rules set
	// fixed_windows).
	Version        *int64 `json:"version,omitempty"`
	Instances      *int64 `json:"instances,omitempty"`
	InstancesExact *bool  `json:"instances_exact,omitempty"`
	FixedWindows   *bool  `json:"fixed_windows,omitempty"`
}

// AcquireAllRequest is the body of POST /v1/acquire: several limiters, each once.
type AcquireAllRequest struct {
	Requests []LimiterPermits  `json:"requests"`           // required, 1 to 64
	MaxWait  *limiter.Duration `json:"max_wait,omitempty"` // for each limiter; default unlimited; negative is 0
	Block    *bool             `json:"block,omitempty"`    // wait out the longest delay before answering
}

// LimiterPermits is one limiter of an AcquireAllRequest.
type LimiterPermits struct {
	Name    string `json:"name"`              // a limiter or a template instance
	Permits *int64 `json:"permits,omitempty"` // default 1; 0 checks without taking
}

// AcquireAll answers POST /v1/acquire: 200 when every limiter granted,
// 429 when one refused (nothing was taken). Results are each limiter's
// answer in request order, as its own acquire would answer (in a 429, one
// that would have granted answers granted although it took nothing).
type AcquireAll struct {
	Granted bool              `json:"granted"`
	Results []json.RawMessage `json:"results"`
}

// Shadowed answers an acquire a limiter in shadow mode refused and let
// through (200): a grant that took nothing, with the refusal's retry_after_ns.
type Shadowed struct {
	Granted
	Shadow     bool  `json:"shadow"` // true
	RetryAfter int64 `json:"retry_after_ns"`
}

// Answer reads any acquire answer of permits: a Granted, a Denied or a
// Shadowed (a Denied's fields are a Shadowed's), and a window limiter's
// (its Window fields; Limit 0 for others).
type Answer struct {
	Shadowed
	Window
}

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
