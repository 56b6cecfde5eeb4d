package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/internal/testkit/grpctest"
)

// serve's gRPC port is bounded by LIMITD_GRPC_*: it advertises the streams
// per connection and its windows, closes a connection past the bound
// (counted in /metrics), and answers a malformed request INVALID_ARGUMENT.
func TestServeGRPCLimits(t *testing.T) {
	base, logs, _ := startServe(t, map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:0",
		"LIMITD_GRPC_MAX_CONCURRENT_STREAMS": "3", "LIMITD_GRPC_MAX_CONNECTIONS": "2"})
	addr := regexp.MustCompile(`grpc_addr=(\S+)`).FindStringSubmatch(logs.String())[1]

	// A connection's settings.
	settings, open := rawSettings(t, addr)
	if settings[http2.SettingMaxConcurrentStreams] != 3 || settings[http2.SettingInitialWindowSize] != 64<<10 ||
		settings[http2.SettingMaxHeaderListSize] != 4<<10 {
		t.Errorf("settings %v, want 3 streams, a 64 KiB window, 4 KiB of metadata", settings)
	}
	// A second connection: a malformed request.
	conn := grpcClient(t, logs)
	var reply []byte
	bad := []byte{0x0a, 0x02, 0xff, 0xfe} // domain "\xff\xfe"
	err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &reply,
		grpc.ForceCodecV2(grpctest.RawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a domain that is not UTF-8: %v, want InvalidArgument", err)
	}
	// A third is closed at once.
	if s, _ := rawSettings(t, addr); s != nil {
		t.Errorf("a connection past LIMITD_GRPC_MAX_CONNECTIONS got settings %v", s)
	}
	_ = open.Close()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nlimitd_grpc_connections_refused_total 1\n") {
		t.Errorf("/metrics lacks limitd_grpc_connections_refused_total 1:\n%s", grep(string(body), "limitd_grpc_"))
	}
	if !strings.Contains(logs.String(), "gRPC connections refused") {
		t.Errorf("no log line of the refusal:\n%s", logs)
	}
}

// rawSettings opens an HTTP/2 connection to addr and returns the server's
// first SETTINGS, and the connection; nil settings if the server closed it.
func rawSettings(t *testing.T, addr string) (map[http2.SettingID]uint32, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a failsafe, not a measure
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil, c
	}
	if err := fr.WriteSettings(); err != nil {
		return nil, c
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, c
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			m := map[http2.SettingID]uint32{}
			_ = sf.ForeachSetting(func(s http2.Setting) error { m[s.ID] = s.Val; return nil })
			return m, c
		}
	}
}

// grep keeps the lines of s that contain sub.
func grep(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}
