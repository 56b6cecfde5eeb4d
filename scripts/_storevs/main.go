//go:build ignore

// storevs (in a folder the go tool skips: it is built only by
// scripts/store-vs.sh, in a module of its own) runs this tree's store and another build's side by side in one
// process, each on a private redis-server of its own, in alternating rounds,
// and prints the medians: scripts/store-vs.sh builds it against the other
// tree (imported as github.com/limitd/other) and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	thislim "github.com/limitd/limitd/limiter"
	thisstore "github.com/limitd/limitd/store"
	otherlim "github.com/limitd/other/limiter"
	otherstore "github.com/limitd/other/store"
)

// acquire takes one permit of name and reports whether it was granted.
type acquire func(ctx context.Context, name string) (bool, error)

// side is one store under test.
type side struct {
	label string
	rdb   *redis.Client
	get   acquire
}

func main() {
	rounds := flag.Int("rounds", 20, "alternating rounds per row")
	dur := flag.Duration("round", time.Second, "length of a round")
	other := flag.String("other", "other", "the other tree's name, for the output")
	flag.Parse()
	ctx := context.Background()

	srvA, srvB := startRedis(), startRedis()
	defer srvA.stop()
	defer srvB.stop()
	this := side{label: "this tree", rdb: redis.NewClient(&redis.Options{Addr: srvA.addr})}
	that := side{label: *other, rdb: redis.NewClient(&redis.Options{Addr: srvB.addr})}

	fmt.Printf("%d rounds of %v per row, alternating; speed = this tree's acquires/s over %s's (> 1: this tree is faster)\n\n", *rounds, *dur, *other)
	fmt.Println("| row | speed, median (range) | this tree µs/op | " + *other + " µs/op |")
	fmt.Println("|---|---|---|---|")
	for _, row := range []struct {
		label      string
		keys       int
		goroutines int
		batched    bool
	}{
		{"1 goroutine, one key", 1, 1, false},
		{"1 goroutine, 10,000 keys", 10000, 1, false},
		{"32 goroutines batched, one key", 1, 32, true},
		{"32 goroutines batched, 10,000 keys", 10000, 32, true},
	} {
		names := make([]string, row.keys)
		for i := range names {
			names[i] = "k" + strconv.Itoa(i)
		}
		for _, s := range []*side{&this, &that} {
			if err := s.rdb.FlushAll(ctx).Err(); err != nil {
				fail(err)
			}
		}
		var closers []func()
		this.get, closers = newThis(ctx, this.rdb, names, row.batched, closers)
		that.get, closers = newOther(ctx, that.rdb, names, row.batched, closers)
		var speed, a, b []float64
		run(this, names, row.goroutines, 200*time.Millisecond) // warm up: scripts loaded, keys made
		run(that, names, row.goroutines, 200*time.Millisecond)
		for r := range *rounds {
			first, second := &this, &that
			if r%2 == 1 {
				first, second = second, first
			}
			x := run(*first, names, row.goroutines, *dur)
			y := run(*second, names, row.goroutines, *dur)
			if first != &this {
				x, y = y, x
			}
			a, b, speed = append(a, x), append(b, y), append(speed, y/x)
		}
		for _, c := range closers {
			c()
		}
		fmt.Printf("| %s | **%.3f×** (%.2f–%.2f) | %.1f | %.1f |\n", row.label, median(speed), minOf(speed), maxOf(speed), median(a)/1e3, median(b)/1e3)
	}
}

// newThis is this tree's store over rdb with names made (rate 1e6/s, burst
// inf: it grants every call), batched or not.
func newThis(ctx context.Context, rdb *redis.Client, names []string, batched bool, closers []func()) (acquire, []func()) {
	opts := []thisstore.Option{thisstore.WithPrefix("vs")}
	if batched {
		opts = append(opts, thisstore.WithBatching(64))
	}
	s := thisstore.New(rdb, opts...)
	for _, n := range names {
		if _, _, err := s.Put(ctx, n, thislim.Config{Rate: 1e6, Burst: thislim.B(math.Inf(1))}); err != nil {
			fail(err)
		}
	}
	return func(ctx context.Context, name string) (bool, error) {
		d, err := s.Acquire(ctx, name, 1, 0)
		return d.Granted, err
	}, append(closers, func() { _ = s.Close() })
}

// newOther is newThis for the other tree.
func newOther(ctx context.Context, rdb *redis.Client, names []string, batched bool, closers []func()) (acquire, []func()) {
	opts := []otherstore.Option{otherstore.WithPrefix("vs")}
	if batched {
		opts = append(opts, otherstore.WithBatching(64))
	}
	s := otherstore.New(rdb, opts...)
	for _, n := range names {
		if _, _, err := s.Put(ctx, n, otherlim.Config{Rate: 1e6, Burst: otherlim.B(math.Inf(1))}); err != nil {
			fail(err)
		}
	}
	return func(ctx context.Context, name string) (bool, error) {
		d, err := s.Acquire(ctx, name, 1, 0)
		return d.Granted, err
	}, append(closers, func() { _ = s.Close() })
}

// run acquires from goroutines for d and returns the wall time per acquire
// (ns). Every call must be granted: a side that refuses does not decide
// what the other does.
func run(s side, names []string, goroutines int, d time.Duration) float64 {
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			i := g
			for time.Since(start) < d {
				for range 50 {
					ok, err := s.get(ctx, names[i%len(names)])
					if err != nil || !ok {
						fail(fmt.Errorf("%s: acquire of %s: granted %v, %v", s.label, names[i%len(names)], ok, err))
					}
					i += goroutines
				}
				n.Add(50)
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(n.Load())
}

// server is a private redis-server on a free loopback port.
type server struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis() *server {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "storevs")
	if err != nil {
		fail(err)
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fail(fmt.Errorf("redis-server: %w (apt-get install -y redis-server)", err))
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", s.addr); err == nil {
			_ = c.Close()
			return s
		}
		if time.Now().After(deadline) {
			s.stop()
			fail(fmt.Errorf("redis-server on %s did not listen within 10 s", s.addr))
		}
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "storevs:", strings.TrimSpace(err.Error()))
	os.Exit(1)
}
