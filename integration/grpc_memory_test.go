//go:build linux

package integration

// BenchmarkGRPCFloodMemory measures what a flood of gRPC calls that never
// send their message costs `limitd serve` (the real binary, its embedded
// Redis: the calls never reach Redis), and how the memory comes back after
// it: the flood fills the default bounds (LIMITD_GRPC_MAX_CONNECTIONS ×
// LIMITD_GRPC_MAX_CONCURRENT_STREAMS calls, with about Envoy's metadata),
// holds them 30 s, and closes its connections; the process's resident memory
// is then read every 5 s until it is under a quarter of what it was while
// the flood was held, or 6 minutes have passed. Two processes run side by side: one
// as limitd serve starts by default (no GOMEMLIMIT), one with
// GOMEMLIMIT=400MiB, below what the flood holds. Metrics, for each
// ("default-", "limit400-"): MB-before, MB-held, CPU-held (cores the process
// used while the flood was held and idle), MB-15s (15 s after the release),
// s-back (seconds from the release until the memory is back under a
// quarter; -1: not within the 6 minutes).
//
//	go test -run='^$' -bench=BenchmarkGRPCFloodMemory -benchtime=1x -timeout=30m ./integration/

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

func BenchmarkGRPCFloodMemory(b *testing.B) {
	const (
		hold  = 30 * time.Second
		every = 5 * time.Second
		watch = 6 * time.Minute
	)
	lim := grpcapi.DefaultLimits()
	type side struct {
		name, gomemlimit string
		pid              int
		conns            []net.Conn
		before, held     float64
		cpu              time.Duration
		after15, back    float64
		timeline         strings.Builder
	}
	for range b.N {
		sides := []*side{{name: "default"}, {name: "limit400", gomemlimit: "400MiB"}}
		for _, s := range sides {
			env := map[string]string{"LIMITD_GRPC_ADDR": net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(b)))}
			if s.gomemlimit != "" {
				env["GOMEMLIMIT"] = s.gomemlimit
			}
			s.pid = svServe(b, env).cmd.Process.Pid
			s.before = fmRSS(b, s.pid)
			for range lim.MaxConnections {
				s.conns = append(s.conns, fmFlood(b, env["LIMITD_GRPC_ADDR"], int(lim.MaxConcurrentStreams)))
			}
		}
		t0 := time.Now()
		for _, s := range sides {
			s.held, s.cpu = fmRSS(b, s.pid), fmCPU(b, s.pid)
		}
		time.Sleep(hold)
		took := time.Since(t0)
		for _, s := range sides {
			s.cpu = fmCPU(b, s.pid) - s.cpu
			for _, c := range s.conns {
				_ = c.Close()
			}
			s.back = -1
		}
		released := time.Now()
		for waiting := len(sides); waiting > 0 && time.Since(released) < watch; {
			time.Sleep(every)
			since := time.Since(released)
			for _, s := range sides {
				if s.back >= 0 {
					continue
				}
				rss := fmRSS(b, s.pid)
				fmt.Fprintf(&s.timeline, " %.0f", rss)
				if s.after15 == 0 && since >= 15*time.Second {
					s.after15 = rss
				}
				if rss < s.held/4 {
					s.back = since.Seconds()
					waiting--
				}
			}
		}
		for _, s := range sides {
			cores := s.cpu.Seconds() / took.Seconds()
			b.Logf("%s: %.0f MB before, %.0f MB holding %d×%d calls (%.2f cores), then every %v:%s MB",
				s.name, s.before, s.held, lim.MaxConnections, lim.MaxConcurrentStreams, cores, every, s.timeline.String())
			b.ReportMetric(s.before, s.name+"-MB-before")
			b.ReportMetric(s.held, s.name+"-MB-held")
			b.ReportMetric(cores, s.name+"-CPU-held")
			b.ReportMetric(s.after15, s.name+"-MB-15s")
			b.ReportMetric(s.back, s.name+"-s-back")
		}
	}
}

// BenchmarkGRPCFloodWaves floods `limitd serve` as BenchmarkGRPCFloodMemory
// does, 10 times in a row, each flood's connections closed before the next
// starts: what a flood holds is garbage once it ends, which the collector
// takes back only when the heap reaches its goal (GOGC 400: five times what
// it found live), so the process grows past one flood's size. One process
// runs as limitd serve starts by default, then one with GOMEMLIMIT=1GiB.
// Metrics: MB-first (after the first flood), MB-max (the most after any).
//
//	go test -run='^$' -bench=BenchmarkGRPCFloodWaves -benchtime=1x -timeout=30m ./integration/
func BenchmarkGRPCFloodWaves(b *testing.B) {
	lim := grpcapi.DefaultLimits()
	for range b.N {
		for _, side := range []struct{ name, gomemlimit string }{{"default", ""}, {"limit1g", "1GiB"}} {
			env := map[string]string{"LIMITD_GRPC_ADDR": net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(b)))}
			if side.gomemlimit != "" {
				env["GOMEMLIMIT"] = side.gomemlimit
			}
			p := svServe(b, env)
			var first, most float64
			var line strings.Builder
			for range 10 {
				conns := make([]net.Conn, lim.MaxConnections)
				for i := range conns {
					conns[i] = fmFlood(b, env["LIMITD_GRPC_ADDR"], int(lim.MaxConcurrentStreams))
				}
				for _, c := range conns {
					_ = c.Close()
				}
				time.Sleep(time.Second)
				rss := fmRSS(b, p.cmd.Process.Pid)
				fmt.Fprintf(&line, " %.0f", rss)
				if first == 0 {
					first = rss
				}
				most = max(most, rss)
			}
			_ = p.cmd.Process.Kill()
			b.Logf("%s: after each flood:%s MB", side.name, line.String())
			b.ReportMetric(first, side.name+"-MB-first")
			b.ReportMetric(most, side.name+"-MB-max")
		}
	}
}

// fmFlood opens an HTTP/2 connection to addr and starts n rate limit calls
// on it that send no message; it returns once the server has read them all.
func fmFlood(b *testing.B, addr string, n int) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		b.Fatal(err)
	}
	_ = fr.WriteSettings()
	for i := range n {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + grpcapi.ServiceName + "/ShouldRateLimit"},
			{":authority", "limitd"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", "envoy/1.31.0"},
			{"x-envoy-internal", "true"}, {"x-request-id", "6c2a4e63-1f1b-4b53-8c4e-0f3f7a2d9b11"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
	}
	// The ping's answer comes after the server has read every stream.
	_ = fr.WritePing(false, [8]byte{1})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatalf("flood: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			b.Fatalf("flood: stream %d reset (%v) within the bound", f.StreamID, f.ErrCode)
		case *http2.PingFrame:
			if f.IsAck() {
				return c
			}
		}
	}
}

// fmRSS is a process's resident memory in MB (/proc).
func fmRSS(b *testing.B, pid int) float64 {
	s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(s)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/pid/status")
	return 0
}

// fmCPU is the CPU time a process has used (/proc, in clock ticks of 10 ms).
func fmCPU(b *testing.B, pid int) time.Duration {
	s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses.
	f := strings.Fields(string(s[bytes.LastIndexByte(s, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
