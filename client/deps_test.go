package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientCompilesNoRedis: a program over HTTP (client.NewHTTP,
// httplimit) compiles neither go-redis, nor the Lua scripts, nor the store:
// Redis is package redisclient's alone.
func TestClientCompilesNoRedis(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps",
		"github.com/limitd/limitd/client", "github.com/limitd/limitd/httplimit").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/redis/go-redis") || p == "github.com/limitd/limitd/lua" ||
			p == "github.com/limitd/limitd/store" {
			t.Errorf("client or httplimit depends on %s", p)
		}
	}
}
