package store_test

// Measurements for bench_test.go: CPU time of redis-server and of this
// process, and the server time per script call from INFO commandstats.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// benchServerCPU returns a function reading the CPU time in ns that
// redis-server has used so far (its main thread, which runs every command),
// from /proc/<pid>/schedstat; nil where that is not available.
func benchServerCPU(ctx context.Context, rdb *redis.Client) func() int64 {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	for line := range strings.Lines(info) {
		if pid, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return benchCPUReader(func() (int64, error) {
				b, err := os.ReadFile("/proc/" + pid + "/schedstat")
				if err != nil {
					return 0, err
				}
				ns, _, _ := strings.Cut(string(b), " ")
				return strconv.ParseInt(ns, 10, 64)
			})
		}
	}
	return nil
}

// benchClientCPU returns a function reading the CPU time in ns that this
// process (all threads, user and system) has used so far, from
// /proc/self/stat in clock ticks of 10 ms; nil where that is not available.
func benchClientCPU() func() int64 {
	return benchCPUReader(func() (int64, error) {
		b, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			return 0, err
		}
		// Fields 14 and 15 (utime, stime) count from the end of "(comm)".
		_, rest, _ := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			return 0, errors.New("short /proc/self/stat")
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		s, err2 := strconv.ParseInt(f[12], 10, 64)
		return (u + s) * 10_000_000, errors.Join(err1, err2)
	})
}

// benchCPUReader turns read into a reader returning -1 on failure, or nil if
// the first read already fails.
func benchCPUReader(read func() (int64, error)) func() int64 {
	if _, err := read(); err != nil {
		return nil
	}
	return func() int64 {
		ns, err := read()
		if err != nil {
			return -1
		}
		return ns
	}
}

// benchCPUMeter reports the CPU time per op between its creation and its
// report call as the metric unit; it reports nothing if CPU time cannot be
// read.
type benchCPUMeter struct {
	read  func() int64
	start int64
	unit  string
}

func benchMeter(read func() int64, unit string) benchCPUMeter {
	m := benchCPUMeter{read: read, unit: unit}
	if read != nil {
		m.start = read()
	}
	return m
}

func (m benchCPUMeter) report(b *testing.B) {
	if m.read == nil || m.start < 0 {
		return
	}
	if end := m.read(); end >= 0 {
		b.ReportMetric(float64(end-m.start)/1e3/float64(b.N), m.unit)
	}
}

// benchScriptCost reads the server time per script or function call (EVALSHA
// and FCALL together) since the last CONFIG RESETSTAT from INFO commandstats,
// lines such as
// "cmdstat_evalsha:calls=3,usec=21,usec_per_call=7.00,rejected_calls=0,failed_calls=0".
func benchScriptCost(ctx context.Context, rdb *redis.Client) (usPerCall float64, calls int64, err error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	var usec int64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		fields, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			if fields, ok = strings.CutPrefix(line, "cmdstat_fcall:"); !ok {
				continue
			}
		}
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			var n int64
			switch k {
			case "calls", "usec":
				if n, err = strconv.ParseInt(v, 10, 64); err != nil {
					return 0, 0, fmt.Errorf("commandstats %q: %w", line, err)
				}
			}
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	if calls == 0 {
		return 0, 0, errors.New("INFO commandstats has no EVALSHA or FCALL calls")
	}
	return float64(usec) / float64(calls), calls, nil
}
