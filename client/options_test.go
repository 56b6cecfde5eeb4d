package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// Each option is accepted exactly where it is honoured: passing it anywhere
// else does not compile, because it lacks the interface.
func TestOptionsAreTypedByWhereTheyApply(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		opt                         any
		handle, client, redis, http bool
	}{
		{"WithFallback", client.WithFallback(client.FallbackSafe), true, true, true, true},
		{"WithSafeRate", client.WithSafeRate(1), true, true, true, true},
		{"WithWindow", client.WithWindow(time.Millisecond), true, true, true, true},
		{"WithStaleAfter", client.WithStaleAfter(time.Second), true, true, true, true},
		{"WithRetryInterval", client.WithRetryInterval(time.Second), true, true, true, true},
		{"WithClock", client.WithClock(nil), false, true, true, true},
		{"WithPrefix", client.WithPrefix("p"), false, false, true, false},
		{"WithToken", client.WithToken("t"), false, false, false, true},
		{"WithHTTPClient", client.WithHTTPClient(http.DefaultClient), false, false, false, true},
	} {
		_, handle := tc.opt.(client.Option)
		_, cl := tc.opt.(client.ClientOption)
		_, redis := tc.opt.(client.RedisOption)
		_, ht := tc.opt.(client.HTTPOption)
		if handle != tc.handle || cl != tc.client || redis != tc.redis || ht != tc.http {
			t.Errorf("%s: Option %v ClientOption %v RedisOption %v HTTPOption %v; want %v %v %v %v",
				tc.name, handle, cl, redis, ht, tc.handle, tc.client, tc.redis, tc.http)
		}
	}
}
