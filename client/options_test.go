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
		name                 string
		opt                  any
		handle, client, http bool
	}{
		{"WithFallback", client.WithFallback(client.FallbackSafe), true, true, true},
		{"WithSafeRate", client.WithSafeRate(1), true, true, true},
		{"WithWindow", client.WithWindow(time.Millisecond), true, true, true},
		{"WithStaleAfter", client.WithStaleAfter(time.Second), true, true, true},
		{"WithRetryInterval", client.WithRetryInterval(time.Second), true, true, true},
		{"WithClock", client.WithClock(nil), false, true, true},
		{"WithoutRefusalCounts", client.WithoutRefusalCounts(), false, true, true},
		{"WithToken", client.WithToken("t"), false, false, true},
		{"WithHTTPClient", client.WithHTTPClient(http.DefaultClient), false, false, true},
	} {
		_, handle := tc.opt.(client.Option)
		_, cl := tc.opt.(client.ClientOption)
		_, ht := tc.opt.(client.HTTPOption)
		if handle != tc.handle || cl != tc.client || ht != tc.http {
			t.Errorf("%s: Option %v ClientOption %v HTTPOption %v; want %v %v %v",
				tc.name, handle, cl, ht, tc.handle, tc.client, tc.http)
		}
	}
}
