package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
)

func TestLimiterNameIsAlwaysValid(t *testing.T) {
	long := strings.Repeat("x", 200)
	seen := map[string]string{}
	for _, tc := range []struct{ prefix, key, want string }{
		{"ip:", "192.0.2.7", "ip:192.0.2.7"},
		{"ip:", "2001:db8::1", "ip:2001:db8::1"},
		{"", "abc.DEF_-:9", ""}, // '_' is not a name character
		{"key:", "a b", ""},
		{"key:", "a/b", ""},
		{"key:", "a-b", "key:a-b"},
		{"", "", ""},
		{"", "-lead", ""},
		{"", ".", ""},
		{"", "ünï", ""},
		{"ip:", "fe80::1%eth0", ""},
		{"k:", long, ""},
		{"k:", long + "y", ""},
		{"", strings.Repeat("/", 300), ""},
	} {
		got := limiterName(tc.prefix, tc.key)
		if err := limitd.CheckName(got); err != nil {
			t.Errorf("limiterName(%q, %q) = %q: %v", tc.prefix, tc.key, got, err)
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("limiterName(%q, %q) = %q, want %q (valid names are kept)", tc.prefix, tc.key, got, tc.want)
		}
		if tc.want == "" && tc.prefix != "" && !strings.HasPrefix(got, tc.prefix) && len(tc.prefix+tc.key) <= maxName {
			t.Errorf("limiterName(%q, %q) = %q lost its prefix", tc.prefix, tc.key, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("keys %q and %q share the limiter %q", other, tc.prefix+tc.key, got)
		}
		seen[got] = tc.prefix + tc.key
	}
	if a, b := limiterName("", "a b"), limiterName("", "a b"); a != b {
		t.Errorf("limiterName is not deterministic: %q, %q", a, b)
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{"default": `"default"`, `a"b\c`: `"a\"b\\c"`, "ü\n": `""`} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

// However many keys come by, the middleware and the client keep at most
// WithMaxKeys handles.
func TestMiddlewareHandlesAreBounded(t *testing.T) {
	_, rdb, st := storetest.Mini(t)
	if _, err := st.PutTemplate(t.Context(), limitd.Template{ID: "t", Pattern: "u:*",
		Limiter: limiter.Config{Rate: 100, Burst: limiter.B(1)}}); err != nil {
		t.Fatal(err)
	}
	c := redisclient.New(rdb)
	defer c.Close()
	kl := newKeyedLimits(c, []Option{KeyByHeader("U"), WithLimiterPrefix("u:"), WithMaxKeys(10)})
	var handles []*client.Limiter
	for i := range 100 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("U", fmt.Sprint(i))
		rec := httptest.NewRecorder()
		if !kl.serve(rec, r) {
			t.Fatalf("key %d refused: %d %s", i, rec.Code, rec.Body)
		}
		kl.mu.Lock()
		handles = append(handles, kl.byKey[fmt.Sprint("u:", i)].Value.(*keyedHandle).l)
		kl.mu.Unlock()
	}
	kl.mu.Lock()
	n, m2 := kl.lru.Len(), len(kl.byKey)
	kl.mu.Unlock()
	// The client forgets a handle once it is closed: an open one is one it keeps.
	nc := 0
	for _, l := range handles {
		if _, _, err := l.AllowNext(t.Context()); !errors.Is(err, client.ErrClosed) {
			nc++
		}
	}
	if n != 10 || m2 != 10 || nc != 10 {
		t.Fatalf("after 100 keys: %d in the LRU, %d in its index, %d client handles open; want 10 each", n, m2, nc)
	}
}
