//go:build ignore

// storevs runs this tree's store and another build's side by side in one
// process, in rounds in which the side going first and each side's server
// alternate, and prints the medians of the speed and of the CPU time per
// acquire (a side's round has the process and the servers to itself, so
// their CPU time in it is its own). scripts/store-vs.sh says more, builds it
// against the other tree, imported as github.com/limitd/other, and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
	thislim "github.com/limitd/limitd/limiter"
	thisstore "github.com/limitd/limitd/store"
	otherlim "github.com/limitd/other/limiter"
	otherstore "github.com/limitd/other/store"
)

// prog starts the redis-servers and stops them at the end or on a failure.
var prog = redistest.NewProgram("storevs")

// acquire takes one permit of name and reports whether it was granted.
type acquire func(ctx context.Context, name string) (bool, error)

// side is one tree under test: its store on each of the two servers.
type side struct {
	label string
	get   [2]acquire
}

// TestMain is the program: its script builds it with go test -c and runs it
// with the flags below, not as a test.
func TestMain(*testing.M) {
	nRounds := flag.Int("rounds", 20, "alternating rounds per row")
	dur := flag.Duration("round", time.Second, "length of a round")
	other := flag.String("other", "other", "the other tree's name, for the output")
	only := flag.String("only", "", "run only the rows whose label holds this")
	flag.Parse()
	ctx := context.Background()

	// Two servers, each side's store on both, so that neither the order nor
	// a server favours a side.
	defer prog.Close()
	var rdbs [2]*redis.Client
	for i := range rdbs {
		srv := redistest.Server(prog)
		redisPIDs = append(redisPIDs, srv.Pid())
		rdbs[i] = srv.Client()
	}
	this, that := side{label: "this tree"}, side{label: *other}

	fmt.Printf("%d rounds of %v per row; speed = this tree's acquires/s over %s's (> 1: this tree is faster)\n\n", *nRounds, *dur, *other)
	fmt.Println("| row | speed, median (range) | this tree µs/op | " + *other + " µs/op | CPU per acquire, this tree / " + *other + " (range) | this tree CPU µs/op, Go + Redis | " + *other + " CPU µs/op |")
	fmt.Println("|---|---|---|---|---|---|---|")
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
		if !strings.Contains(row.label, *only) {
			continue
		}
		names := make([]string, row.keys)
		for i := range names {
			names[i] = "k" + strconv.Itoa(i)
		}
		var closers []func()
		for i, rdb := range rdbs {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				prog.Fatal(err)
			}
			this.get[i], closers = newThis(ctx, rdb, names, row.batched, closers)
			that.get[i], closers = newOther(ctx, rdb, names, row.batched, closers)
			_ = run(this, i, names, row.goroutines, 200*time.Millisecond) // warm up: scripts loaded, keys made
			_ = run(that, i, names, row.goroutines, 200*time.Millisecond)
		}
		var speed, a, b, cpu, ca, cb, ga, gb []float64
		for r := range *nRounds {
			srv := r / 2 % 2 // this tree's server; the other tree runs on the other
			x, y := func() (sample, sample) {
				if r%2 == 0 {
					x := run(this, srv, names, row.goroutines, *dur)
					return x, run(that, 1-srv, names, row.goroutines, *dur)
				}
				y := run(that, 1-srv, names, row.goroutines, *dur)
				return run(this, srv, names, row.goroutines, *dur), y
			}()
			a, b, speed = append(a, x.wall), append(b, y.wall), append(speed, y.wall/x.wall)
			ca, cb, cpu = append(ca, x.goCPU+x.redisCPU), append(cb, y.goCPU+y.redisCPU), append(cpu, (x.goCPU+x.redisCPU)/(y.goCPU+y.redisCPU))
			ga, gb = append(ga, x.goCPU), append(gb, y.goCPU)
		}
		for _, c := range closers {
			c()
		}
		fmt.Printf("| %s | **%.3f×** (%.2f–%.2f) | %.1f | %.1f | **%.3f×** (%.2f–%.2f) | %.2f + %.2f | %.2f + %.2f |\n", row.label,
			rounds.Median(speed), slices.Min(speed), slices.Max(speed), rounds.Median(a)/1e3, rounds.Median(b)/1e3,
			rounds.Median(cpu), slices.Min(cpu), slices.Max(cpu),
			rounds.Median(ga)/1e3, (rounds.Median(ca)-rounds.Median(ga))/1e3, rounds.Median(gb)/1e3, (rounds.Median(cb)-rounds.Median(gb))/1e3)
	}
}

// started is how long a limiter's schedule runs before it is timed: a
// schedule starts at its first acquire, and a batch of acquires on one key at
// one Redis time is granted from its backlog (10 ms at 1e6/s: 10,000
// permits), which no round here uses up (a store takes at most a few
// hundred thousand a second), so no call is ever refused.
const started = 10 * time.Millisecond

// newThis is this tree's store over rdb with names made, batched or not.
func newThis(ctx context.Context, rdb *redis.Client, names []string, batched bool, closers []func()) (acquire, []func()) {
	opts := []thisstore.Option{thisstore.WithPrefix("vs-this")}
	if batched {
		opts = append(opts, thisstore.WithBatching(64))
	}
	s := thisstore.New(rdb, opts...)
	get := func(ctx context.Context, name string) (bool, error) {
		d, err := s.Acquire(ctx, name, 1, 0)
		return d.Granted, err
	}
	prepare(ctx, names, func(n string) error {
		_, _, err := s.Put(ctx, n, thislim.Config{Rate: 1e6, Burst: thislim.B(math.Inf(1))})
		return err
	}, get)
	return get, append(closers, func() { _ = s.Close() })
}

// newOther is newThis for the other tree (its own types: the same code).
func newOther(ctx context.Context, rdb *redis.Client, names []string, batched bool, closers []func()) (acquire, []func()) {
	opts := []otherstore.Option{otherstore.WithPrefix("vs-other")}
	if batched {
		opts = append(opts, otherstore.WithBatching(64))
	}
	s := otherstore.New(rdb, opts...)
	get := func(ctx context.Context, name string) (bool, error) {
		d, err := s.Acquire(ctx, name, 1, 0)
		return d.Granted, err
	}
	prepare(ctx, names, func(n string) error {
		_, _, err := s.Put(ctx, n, otherlim.Config{Rate: 1e6, Burst: otherlim.B(math.Inf(1))})
		return err
	}, get)
	return get, append(closers, func() { _ = s.Close() })
}

// prepare makes each of names with put (rate 1e6/s, burst inf: every call
// granted) and starts its schedule with one acquire, from 32 goroutines,
// then lets the schedules run for started.
func prepare(ctx context.Context, names []string, put func(string) error, get acquire) {
	const goroutines = 32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < len(names); i += goroutines {
				if err := put(names[i]); err != nil {
					prog.Fatal(err)
				}
				if _, err := get(ctx, names[i]); err != nil {
					prog.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(started)
}

// sample is one side's round: per acquire, the wall time and the CPU time
// of this process and of the redis-servers (ns).
type sample struct{ wall, goCPU, redisCPU float64 }

// redisPIDs are the redis-servers' processes.
var redisPIDs []int

// run acquires from goroutines for d through s's store on server srv and
// returns its sample. Every call must be granted: a side that refuses does
// not decide what the other does.
func run(s side, srv int, names []string, goroutines int, d time.Duration) sample {
	ctx := context.Background()
	go0, redis0 := processCPU(), redisCPU()
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			i := g
			for time.Since(start) < d {
				for range 50 {
					ok, err := s.get[srv](ctx, names[i%len(names)])
					if err != nil || !ok {
						prog.Fatalf("%s: acquire of %s: granted %v, %v", s.label, names[i%len(names)], ok, err)
					}
					i += goroutines
				}
				n.Add(50)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	k := float64(n.Load())
	return sample{float64(wall) / k, float64(processCPU()-go0) / k, float64(redisCPU()-redis0) / k}
}

// processCPU is this process's CPU time (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		prog.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the redis-servers' CPU time (user and system).
func redisCPU() time.Duration {
	var t time.Duration
	for _, pid := range redisPIDs {
		t += redistest.ProcessCPU(prog, pid)
	}
	return t
}
