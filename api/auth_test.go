package api_test

import (
	"testing"

	"github.com/limitd/limitd/api"
)

func TestAuth(t *testing.T) {
	none := []string{"Authorization", ""}
	admin := []string{"Authorization", "Bearer " + adminToken}
	user := []string{"Authorization", "Bearer " + userToken}
	type call struct {
		method, path string
		body         any
	}
	write := call{"PUT", "/v1/limiters/a", `{"rate":1}`}
	reads := []call{{"GET", "/v1/limiters/a", nil}, {"POST", "/v1/limiters/a/acquire", nil}, {"GET", "/v1/limiters/a/wait", nil}, {"GET", "/v1/templates", nil},
		{"POST", "/v1/limiters/a/charge", `{"permits":1}`}}
	open := []call{{"GET", "/healthz", nil}, {"GET", "/readyz", nil}, {"GET", "/metrics", nil}, {"GET", "/openapi.yaml", nil}}

	for _, c := range []struct {
		name         string
		admin, token string
		writeOK      [][]string // credentials a write succeeds with
		writeDenied  [][]string
		readOK       [][]string
		readDenied   [][]string
	}{
		{"no tokens", "", "", [][]string{none}, nil, [][]string{none}, nil},
		{"admin token only", adminToken, "", [][]string{admin}, [][]string{none, user}, [][]string{none, admin}, nil},
		{"token only", "", userToken, [][]string{user}, [][]string{none, admin}, [][]string{user}, [][]string{none, admin}},
		{"both", adminToken, userToken, [][]string{admin}, [][]string{none, user}, [][]string{user, admin}, [][]string{none, {"Authorization", "Bearer " + userToken + "x"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *api.Options) { o.AdminToken, o.Token = c.admin, c.token })
			for _, h := range c.writeDenied {
				r := e.must(401, write.method, write.path, write.body, h...)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			}
			for _, h := range c.writeOK {
				if r := e.do(write.method, write.path, write.body, h...); r.code/100 != 2 {
					t.Errorf("write with %q: %s", h, r)
				}
			}
			for _, rc := range reads {
				for _, h := range c.readDenied {
					e.must(401, rc.method, rc.path, rc.body, h...)
				}
				for _, h := range c.readOK {
					e.must(200, rc.method, rc.path, rc.body, h...)
				}
			}
			for _, oc := range open {
				e.must(200, oc.method, oc.path, oc.body, none...)
			}
		})
	}
}
