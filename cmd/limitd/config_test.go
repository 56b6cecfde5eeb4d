package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	want := config{Addr: "127.0.0.1:8080", Prefix: "limitd", LogFormat: "text", LogLevel: "info", AccessLog: "off",
		EventsMaxStreams: api.DefaultMaxEventStreams}
	if c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	// An empty variable is the default, not an error.
	c, err = loadConfig(map[string]string{"LIMITD_ADDR": "", "LIMITD_PREFIX": "", "LIMITD_LOG_LEVEL": ""})
	if err != nil || c != want {
		t.Errorf("empty variables: %+v, %v", c, err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	c, err := loadConfig(map[string]string{
		"LIMITD_ADDR": "0.0.0.0:9000", "LIMITD_REDIS_URL": "redis://r:6379", "LIMITD_PREFIX": "app1",
		"LIMITD_CONFIG": "/etc/limitd.yaml", "LIMITD_ADMIN_TOKEN": "adm", "LIMITD_TOKEN": "tok",
		"LIMITD_METRICS_TOKEN": "met", "LIMITD_INSECURE": "false", "LIMITD_LOG_FORMAT": "JSON", "LIMITD_LOG_LEVEL": "Debug",
		"LIMITD_ACCESS_LOG": "Errors", "LIMITD_SHADOW_MODE": "true", "LIMITD_EVENTS_MAX_STREAMS": "1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := config{Addr: "0.0.0.0:9000", RedisURL: "redis://r:6379", Prefix: "app1", ConfigFile: "/etc/limitd.yaml",
		AdminToken: "adm", Token: "tok", MetricsToken: "met", LogFormat: "json", LogLevel: "debug", AccessLog: "errors", ShadowMode: true,
		EventsMaxStreams: 1000}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
}

// Every variable of API.md's table is read, and no other.
func TestConfigVariables(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		got = append(got, typ.Field(i).Tag.Get("env"))
	}
	want := "LIMITD_ADDR LIMITD_GRPC_ADDR LIMITD_REDIS_URL LIMITD_PREFIX LIMITD_CONFIG LIMITD_ADMIN_TOKEN LIMITD_TOKEN LIMITD_METRICS_TOKEN LIMITD_INSECURE LIMITD_LOG_FORMAT LIMITD_LOG_LEVEL LIMITD_ACCESS_LOG LIMITD_SHADOW_MODE LIMITD_EVENTS_MAX_STREAMS"
	if strings.Join(got, " ") != want {
		t.Errorf("variables %v, want %s", got, want)
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		key, val, want string
	}{
		{"LIMITD_LOG_LEVEL", "loud", `LIMITD_LOG_LEVEL: must be one of debug, info, warn, error (got "loud")`},
		{"LIMITD_ACCESS_LOG", "on", `LIMITD_ACCESS_LOG: must be one of off, errors, all (got "on")`},
		{"LIMITD_LOG_FORMAT", "xml", `LIMITD_LOG_FORMAT: must be one of text, json (got "xml")`},
		{"LIMITD_INSECURE", "yes", `LIMITD_INSECURE: must be true or false (got "yes")`},
		{"LIMITD_SHADOW_MODE", "on", `LIMITD_SHADOW_MODE: must be true or false (got "on")`},
		{"LIMITD_ADDR", "8080", `LIMITD_ADDR: must be host:port, like 127.0.0.1:8080 or 0.0.0.0:8080 (got "8080")`},
		{"LIMITD_ADDR", "127.0.0.1:http", `LIMITD_ADDR: the port must be a number from 0 to 65535 (got "127.0.0.1:http")`},
		{"LIMITD_ADDR", "127.0.0.1:70000", `LIMITD_ADDR: the port must be`},
		{"LIMITD_PREFIX", "a{b}", `LIMITD_PREFIX: must be 1 to 64 of`},
		{"LIMITD_PREFIX", "has space", `LIMITD_PREFIX: must be`},
		{"LIMITD_ADMIN_TOKEN", "secret\n", `LIMITD_ADMIN_TOKEN: must not contain spaces or control characters`},
		{"LIMITD_TOKEN", "a b", `LIMITD_TOKEN: must not contain spaces`},
		{"LIMITD_METRICS_TOKEN", "m\n", `LIMITD_METRICS_TOKEN: must not contain spaces`},
		{"LIMITD_EVENTS_MAX_STREAMS", "many", `LIMITD_EVENTS_MAX_STREAMS: must be a whole number (got "many")`},
		{"LIMITD_EVENTS_MAX_STREAMS", "0", `LIMITD_EVENTS_MAX_STREAMS: must be from 1 to 100000 (got 0)`},
		{"LIMITD_EVENTS_MAX_STREAMS", "100001", `LIMITD_EVENTS_MAX_STREAMS: must be from 1 to 100000`},
	} {
		_, err := loadConfig(map[string]string{tc.key: tc.val})
		if err == nil {
			t.Errorf("%s=%q: no error", tc.key, tc.val)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q:\n got %q\nwant %q…", tc.key, tc.val, err, tc.want)
		}
	}
}

func TestConfigRefusesExposedWithoutAdminToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.168.1.10:8080", "limitd.example:8080"} {
		_, err := loadConfig(map[string]string{"LIMITD_ADDR": addr})
		if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_ADDR: "+addr+" is reachable from other machines") ||
			!strings.Contains(err.Error(), "LIMITD_ADMIN_TOKEN") || !strings.Contains(err.Error(), "LIMITD_INSECURE=true") {
			t.Errorf("%s: err = %v, want a refusal naming LIMITD_ADDR, LIMITD_ADMIN_TOKEN and LIMITD_INSECURE", addr, err)
		}
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr, "LIMITD_ADMIN_TOKEN": "t"}); err != nil {
			t.Errorf("%s with an admin token: %v", addr, err)
		}
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr, "LIMITD_INSECURE": "true"}); err != nil {
			t.Errorf("%s with LIMITD_INSECURE=true: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:0", "localhost:8080", "[::1]:8080"} {
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr}); err != nil {
			t.Errorf("loopback %s refused: %v", addr, err)
		}
	}
}

func TestEnvHelpListsEveryVariable(t *testing.T) {
	h := envHelp()
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		if key := typ.Field(i).Tag.Get("env"); !strings.Contains(h, "  "+key+" ") {
			t.Errorf("help lacks %s:\n%s", key, h)
		}
	}
	for line := range strings.Lines(h) {
		if len([]rune(strings.TrimRight(line, "\n"))) > 80 {
			t.Errorf("help line over 80 columns: %q", line)
		}
	}
	if !strings.Contains(h, "(default 127.0.0.1:8080)") {
		t.Errorf("help lacks the LIMITD_ADDR default:\n%s", h)
	}
}
