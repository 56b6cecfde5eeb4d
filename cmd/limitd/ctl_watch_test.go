package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

func TestCtlFmtDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{-time.Second, "0"},
		{850 * time.Microsecond, "850µs"},
		{250*time.Millisecond + 400*time.Microsecond, "250ms"},
		{1500 * time.Millisecond, "1.5s"},
		{9*time.Second + 960*time.Millisecond, "10s"},
		{94*time.Second + 363677*time.Microsecond, "1m34s"},
		{2 * time.Minute, "2m"},
		{59*time.Minute + 59*time.Second + 700*time.Millisecond, "1h0m"},
		{2*time.Hour + 5*time.Minute + 20*time.Second, "2h5m"},
		{30 * time.Hour, "30h0m"},
	} {
		if got := fmtDuration(tc.d); got != tc.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestCtlFmtRate(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want string
	}{
		{math.NaN(), "-"}, {0, "0"}, {0.5, "0.5"}, {1.234, "1.23"}, {12.54, "12.5"}, {99.96, "100"}, {1234.4, "1234"},
	} {
		if got := fmtRate(tc.r); got != tc.want {
			t.Errorf("fmtRate(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// The watch table: a header, the column names, a row per limiter sorted by
// name, each column aligned (names flush left, numbers flush right), and
// what a kind lacks left empty.
func TestCtlFormatWatch(t *testing.T) {
	nan := math.NaN()
	got := formatWatch(watchTable{
		Server: "http://127.0.0.1:8080", At: time.Date(2026, 11, 27, 20, 1, 2, 0, time.UTC), Redis: "ok",
		Rows: []watchRow{
			{Name: "user-window", Kind: "window", Granted: 2, Refused: 0.5, Util: 0.6, Left: 40, Limit: 100, HasLeft: true,
				Reset: 94*time.Second + 363677*time.Microsecond, HasReset: true},
			{Name: "exports", Kind: "concurrency", Granted: nan, Refused: nan, Util: 0.25, Left: 3, Limit: 4, HasLeft: true},
			{Name: "orders", Kind: "schedule", Granted: 1012.4, Refused: 12.25, Util: 0.97, Wait: 250*time.Millisecond + 17*time.Microsecond, HasWait: true, Saturated: true},
		},
	})
	want := `limitd http://127.0.0.1:8080  20:01:02  redis ok  3 limiter(s)
NAME         KIND         GRANTED/S  REFUSED/S   UTIL   WAIT    LEFT  RESET IN
exports      concurrency          -          -    25%            3/4
orders       schedule          1012       12.2  97% !  250ms
user-window  window               2        0.5    60%         40/100     1m34s
`
	if got != want {
		t.Errorf("the table:\n%s\nwant:\n%s", got, want)
	}
	lost := formatWatch(watchTable{Server: "s", At: time.Unix(0, 0), Redis: "ok", Lost: time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC).UnixNano()})
	if first, _, _ := strings.Cut(lost, "\n"); !strings.Contains(first, "DATA LOST at 2026-11-27T20:00:00Z") || !strings.HasSuffix(first, "0 limiter(s)") {
		t.Errorf("the header after a data loss: %q", first)
	}
}

// A row is the server's signals as they are: ctl keeps no reading of a
// kind of its own. Rates need two reads (span_ns); a shadow limiter's
// would-be refusals are shown as such and never make it saturated; a
// concurrency limiter shows its free slots and no wait (its next lease
// expiry is no reset: the page names it); a window its remaining and its
// reset.
func TestCtlWatchRowOf(t *testing.T) {
	s := time.Second.Nanoseconds()
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	ev := func(kind limiter.Kind, shadow bool, sg *wire.Signals) wire.LimiterEvent {
		return wire.LimiterEvent{Limiter: wire.Limiter{Name: "x", Config: limiter.Config{Kind: kind, Shadow: shadow}}, Signals: sg}
	}
	if r := rowOf(ev(limiter.KindSchedule, false, nil)); !math.IsNaN(r.Granted) || !math.IsNaN(r.Util) || r.HasWait {
		t.Errorf("no signals yet: %+v, want nothing known", r)
	}
	first := &wire.Signals{T: 10 * s, Utilization: 0.2, Wait: 30e6}
	if r := rowOf(ev(limiter.KindSchedule, false, first)); !math.IsNaN(r.Granted) || r.Util != 0.2 || !r.HasWait || r.Wait != 30*time.Millisecond {
		t.Errorf("one read: %+v, want no rate, the utilization and wait", r)
	}
	sched := &wire.Signals{T: 12 * s, Span: 5 * s, GrantedPerS: 80, RefusedPerS: 3, Utilization: 0.8, Saturated: true, Health: "refusing"}
	if r := rowOf(ev(limiter.KindSchedule, false, sched)); r.Granted != 80 || r.Refused != 3 || r.Util != 0.8 || !r.Saturated || r.HasLeft {
		t.Errorf("a schedule: %+v, want the signals' values", r)
	}
	shadow := &wire.Signals{T: 12 * s, Span: 5 * s, GrantedPerS: 1, ShadowRefusedPerS: 2, Utilization: 1, Saturated: true, Shadow: true, Health: "would_refuse"}
	r := rowOf(ev(limiter.KindSchedule, true, shadow))
	if r.Refused != 0 || r.WouldRefuse != 2 || r.Saturated || !r.Shadow {
		t.Errorf("a shadow limiter: %+v, want nothing refused, would refuse 2/s, not flagged", r)
	}
	win := &wire.Signals{T: s, Span: 5 * s, Utilization: 0.6, Limit: i64(100), Remaining: i64(40), ResetAt: i64(91 * s)}
	if w := rowOf(ev(limiter.KindWindow, false, win)); w.Util != 0.6 || !w.HasLeft || w.Left != 40 || w.Limit != 100 || !w.HasReset || w.Reset != 90*time.Second {
		t.Errorf("a window: %+v", w)
	}
	full := &wire.Signals{T: s, Span: 5 * s, Utilization: 1, Saturated: true, Limit: i64(4), InUse: i64(4), Free: i64(0), NextExpiry: i64(27 * s)}
	if c := rowOf(ev(limiter.KindConcurrency, false, full)); c.Left != 0 || c.Limit != 4 || c.HasWait || c.HasReset {
		t.Errorf("a full concurrency limiter: %+v, want 0 free of 4, no wait, no reset", c)
	}
	share := &wire.Signals{T: s, Span: 5 * s, Utilization: 0.75, Held: f64(7.5), Wanted: f64(12), Capacity: f64(10)}
	if c := rowOf(ev(limiter.KindShare, false, share)); c.Util != 0.75 || c.Left != 2.5 || c.Limit != 10 || c.HasWait {
		t.Errorf("a share limiter with 7.5 of 10 held: %+v", c)
	}
	got := formatWatch(watchTable{Server: "s", At: time.Unix(0, 0), Rows: []watchRow{r}})
	if !strings.Contains(got, "schedule (shadow)") || !strings.Contains(got, "would 2") || strings.Contains(got, "!") {
		t.Errorf("a shadow row:\n%s\nwant marked, would refuse 2/s, not flagged", got)
	}
}

func TestCtlFormatTop(t *testing.T) {
	var top ctlTop
	top.By, top.Since = "refused", time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC).UnixNano()
	top.Instances = append(top.Instances,
		struct {
			Name    string  `json:"name"`
			Refused float64 `json:"refused"`
			Granted float64 `json:"granted"`
		}{"user:42", 1200, 30},
		struct {
			Name    string  `json:"name"`
			Refused float64 `json:"refused"`
			Granted float64 `json:"granted"`
		}{"user:7", 3, 1500.5})
	want := `template user: instances by permits refused since 20:00:00 UTC
INSTANCE  REFUSED  GRANTED
user:42      1200       30
user:7          3   1500.5
`
	if got := formatTop("user", top); got != want {
		t.Errorf("top:\n%s\nwant:\n%s", got, want)
	}
	if got := formatTop("user", ctlTop{By: "granted"}); !strings.Contains(got, "no instance") {
		t.Errorf("an empty top: %q", got)
	}
}

func TestCtlFormatTemplates(t *testing.T) {
	n := int64(3)
	got := formatTemplates([]wire.TemplateListed{
		{Template: wire.Template{ID: "user", Pattern: "user:*", Order: 10, Limiter: limiter.Config{Kind: limiter.KindSchedule, Rate: 5}, Version: 2}, Instances: &n},
		{Template: wire.Template{ID: "ip", Pattern: "ip:*", Limiter: limiter.Config{Kind: limiter.KindWindow, Period: "1m"}, Version: 1}},
	})
	want := `ID    PATTERN  ORDER  INSTANCES  KIND      CONFIG           VERSION
user  user:*   10     3          schedule  {"rate":5}       2
ip    ip:*     0      -          window    {"period":"1m"}  1
`
	if got != want {
		t.Errorf("templates:\n%s\nwant:\n%s", got, want)
	}
}

// checkCtl reads each verb's flags, before or after its arguments, with
// their defaults.
func TestCtlFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		names []string
		once  bool
		by    string
		limit int
	}{
		{[]string{"watch"}, nil, false, "refused", 10},
		{[]string{"watch", "--once", "a", "b"}, []string{"a", "b"}, true, "refused", 10},
		{[]string{"watch", "a", "--once"}, []string{"a"}, true, "refused", 10},
		{[]string{"top", "user", "--by", "granted", "--limit", "5"}, []string{"user"}, false, "granted", 5},
		{[]string{"top", "--limit=100", "user"}, []string{"user"}, false, "refused", 100},
		{[]string{"get", "user:42"}, []string{"user:42"}, false, "refused", 10},
		{[]string{"patch", "x", `{"rate":-1}`}, []string{"x", `{"rate":-1}`}, false, "refused", 10},
	} {
		cmd, err := checkCtl(tc.args)
		if err != nil || !slices.Equal(cmd.args, tc.names) || cmd.once != tc.once || cmd.by != tc.by || cmd.limit != tc.limit {
			t.Errorf("checkCtl(%q) = %+v, %v", tc.args, cmd, err)
		}
	}
}

// top and templates ask what the contract says (by, limit, instances=true)
// and print its answers; watch reads the signals and status events of the
// event stream. A stand-in server answers as the contract's examples.
func TestCtlAgainstContract(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		switch r.URL.Path {
		case "/v1/templates/user/top":
			fmt.Fprint(w, `{"by":"granted","since_ns":1795261877834527000,"instances":[{"name":"user:42","refused":0,"granted":900},{"name":"user:7","refused":12,"granted":300}]}`)
		case "/v1/templates":
			fmt.Fprint(w, `{"templates":[{"id":"user","pattern":"user:*","order":0,"limiter":{"kind":"schedule","rate":5},"version":3,"instances":1234}]}`)
		case "/v1/limiters":
			fmt.Fprint(w, `{"limiters":[{"name":"orders","config":{"kind":"schedule","rate":100},"version":1}],"next":""}`)
		case "/v1/events":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: status\ndata: {\"redis\":\"ok\",\"data_lost_at_ns\":1795261800000000000,\"ready\":true,\"limiters\":1}\n\n")
			fmt.Fprint(w, ": keep-alive\n\n")
			fmt.Fprint(w, "event: state\ndata: {\"name\":\"orders\",\"config\":{\"kind\":\"schedule\",\"rate\":100},\"version\":1,"+
				"\"state\":{\"wait_ns\":96000000000,\"delay_ns\":0,\"now_ns\":1795261877834527000,\"version\":1,\"permits\":5},"+
				"\"totals\":{\"granted_calls\":5,\"granted_permits\":5,\"refused_calls\":0,\"refused_permits\":0},"+
				"\"signals\":{\"t_ns\":1795261877834527000,\"span_ns\":5000000000,\"granted_per_s\":50,\"granted_calls_per_s\":50,\"refused_per_s\":0,\"refused_calls_per_s\":0,\"utilization\":0.5,\"wait_ns\":0,\"saturated\":false}}\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	top := mustCtl(t, srv.URL, nil, "top", "user", "--by", "granted", "--limit", "2")
	if want := "INSTANCE  REFUSED  GRANTED\nuser:42         0      900\nuser:7         12      300\n"; !strings.HasSuffix(top, want) || !strings.HasPrefix(top, "template user: instances by permits granted since ") {
		t.Errorf("top printed:\n%s\nwant it to end with:\n%s", top, want)
	}
	tpl := mustCtl(t, srv.URL, nil, "templates")
	if !strings.Contains(tpl, "user  user:*   0      1234") {
		t.Errorf("templates printed:\n%s", tpl)
	}
	w := mustCtl(t, srv.URL, nil, "watch", "--once")
	first, _, _ := strings.Cut(w, "\n")
	if !strings.Contains(first, "redis ok  DATA LOST at 2026-11-21T11:50:00Z") || !strings.Contains(w, "\norders  schedule         50          0   50%     0\n") {
		t.Errorf("watch --once printed:\n%s", w)
	}
	want := []string{"/v1/templates/user/top?by=granted&limit=2", "/v1/templates?instances=true", "/v1/limiters?limit=1000&cursor=", "/v1/events"}
	if !slices.Equal(asked, want) {
		t.Errorf("asked %q, want %q", asked, want)
	}
}
