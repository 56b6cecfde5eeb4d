package boot

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/limitd/limitd/core"
)

// Keeper keeps a configuration applied: every Interval it re-applies what
// Redis lost of it (core.Service.Lost), and it reloads it from its Source
// or takes a new one from Set (rules received over xDS). Set the options
// before Boot; one goroutine calls Boot and Run.
type Keeper struct {
	Service  *core.Service
	Log      *slog.Logger
	Interval time.Duration // between checks
	Timeout  time.Duration // for one check and apply
	What     string        // names the configuration in logs: "the boot file"

	// Source is where the configuration is read again (nil: nowhere),
	// every ReloadEvery (0: never) and on Hup. A changed one that parses
	// replaces the one applied (Reloaded is told); a bad one is logged once
	// (Invalid is told).
	Source      Source
	ReloadEvery time.Duration
	Hup         <-chan os.Signal
	Reloaded    func(*File)
	Invalid     func(error)

	file    *File      // nil: none yet
	push    chan *File // Set
	applied bool       // the file was applied once: what is missing now, Redis lost
	down    bool       // Redis failed the last check: log the outage once
	bad     string     // what was last logged as bad: a content's sum or a read error
	// lossLogged is the Redis time of the data loss last logged.
	lossLogged int64
	reapplying bool // applying the configuration again after a data loss
	// OnDataLost, when set, is told each data loss as it is found (Redis
	// time, Unix ns), after its log line.
	OnDataLost func(at int64)
}

// NewKeeper returns a keeper of the boot file f (nil: none yet) over svc,
// checking every second with a timeout of 10 s and reading f again from
// its path.
func NewKeeper(f *File, svc *core.Service, log *slog.Logger) *Keeper {
	k := &Keeper{file: f, Service: svc, Log: log, Interval: time.Second, Timeout: 10 * time.Second,
		What: "the boot file", push: make(chan *File)}
	if f != nil {
		k.Source = FileSource(f.Path)
	}
	return k
}

// Boot applies the configuration once, within Timeout (without one, only
// the marker: core.Service.Mark). When Redis cannot take it, Run applies it
// once Redis answers.
func (k *Keeper) Boot(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, k.Timeout)
	defer cancel()
	f := k.file
	if f == nil {
		k.applied = k.Service.Mark(ctx, "") == nil
		return
	}
	if err := f.Apply(ctx, k.Service); err != nil {
		k.down = true
		k.Log.Warn("could not apply "+k.What+"; it will be applied once Redis answers", "file", f.Path, "err", err)
		return
	}
	k.applied = true
	k.Log.Info("applied "+k.What, f.logAttrs()...)
}

func (f *File) logAttrs() []any {
	return []any{"file", f.Path, "limiters", len(f.Limiters), "templates", len(f.Templates), "domains", f.Rules.Domains(), "rules", f.Rules.Len()}
}

// Set hands a new configuration to Run, which applies it and tells
// Reloaded. It returns once Run took it, or ctx's error.
func (k *Keeper) Set(ctx context.Context, f *File) error {
	select {
	case k.push <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run checks every Interval, and reloads the file every ReloadEvery and on
// Hup, until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	var reload <-chan time.Time
	if k.ReloadEvery > 0 {
		rt := time.NewTicker(k.ReloadEvery)
		defer rt.Stop()
		reload = rt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.check(ctx)
		case <-k.Service.DataLosses(): // a readiness probe found it first
			k.check(ctx)
		case <-reload:
			k.reload(ctx)
		case <-k.Hup:
			k.reload(ctx)
		case f := <-k.push:
			k.replace(ctx, f)
		}
	}
}

func (k *Keeper) replace(ctx context.Context, f *File) {
	k.file, k.applied = f, false
	k.check(ctx) // applies it
	k.Log.Info("reloaded "+k.What, append(f.logAttrs(), "applied", k.applied)...)
	if k.Reloaded != nil {
		k.Reloaded(f)
	}
}

// reload reads the configuration again and replaces the one kept applied
// when it changed and is valid. What the new one no longer has stays in
// Redis.
func (k *Keeper) reload(ctx context.Context) {
	if k.Source == nil {
		return
	}
	sum, parse, err := k.Source.Read()
	if err != nil {
		if k.bad != err.Error() {
			k.bad = err.Error()
			k.Log.Error("cannot read "+k.What+" again; keeping the one applied", "file", k.Source.Where(), "err", err)
			k.invalid(err)
		}
		return
	}
	if k.file != nil && sum == k.file.Sum || sum == k.bad {
		return
	}
	nb, err := parse()
	if err != nil {
		k.bad = sum
		k.Log.Error(k.What+" changed and is invalid; keeping the one applied", "err", err)
		k.invalid(err)
		return
	}
	k.bad = ""
	k.replace(ctx, nb)
}

func (k *Keeper) invalid(err error) {
	if k.Invalid != nil {
		k.Invalid(err)
	}
}

// check re-applies what Redis lost of the file, logging an outage once
// when it starts and once when it ends; after a data loss
// (docs/reliability.md) the whole configuration goes before the marker.
func (k *Keeper) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, k.Timeout)
	defer cancel()
	if lost, err := k.Service.CheckMarker(ctx); err == nil && lost {
		k.lost(ctx)
	}
	if !k.applied {
		if k.file == nil {
			k.applied = k.Service.Mark(ctx, "") == nil
		} else if err := k.file.Apply(ctx, k.Service); err == nil {
			k.applied = true
			msg := "applied " + k.What
			if k.reapplying {
				msg = "redis lost " + k.What + ": applied it again; limitd is ready"
			}
			k.reapplying = false
			k.Log.Warn(msg, "file", k.file.Path, "limiters", len(k.file.Limiters), "templates", len(k.file.Templates))
		}
	}
	if k.file == nil {
		return
	}
	names, ids := k.file.names()
	lostL, lostT, err := k.Service.Lost(ctx, names, ids)
	if len(lostL)+len(lostT) > 0 {
		if aerr := k.file.applySome(ctx, k.Service, lostL, lostT); aerr != nil {
			err = errors.Join(err, aerr)
		} else {
			k.Log.Warn("redis lost part of the boot configuration (a node restarted without persistence?): applied it again",
				"file", k.file.Path, "limiters", lostL, "templates", lostT)
		}
	}
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		// shutting down
	case err != nil && !k.down:
		k.down = true
		k.Log.Warn("redis unavailable: the boot configuration will be checked again when it is back", "err", err)
	case err == nil && k.down:
		k.down = false
		k.Log.Info("redis is back; the boot configuration is in place", "file", k.file.Path)
	}
}

// lost logs a data loss once and has the rest of the check apply it all.
func (k *Keeper) lost(ctx context.Context) {
	at, _, _ := k.Service.DataLoss()
	if at != k.lossLogged {
		k.lossLogged = at
		what := "limitd writes its marker again at once (no boot file)"
		attrs := []any{"lost_at", time.Unix(0, at).UTC().Format(time.RFC3339Nano)}
		if k.file != nil {
			what = "limitd is not ready until " + k.What + " is applied again"
			attrs = append(attrs, "file", k.file.Path)
		}
		k.Log.Error("redis lost limitd's data (its marker is gone: a restart without persistence, a FLUSHALL?): every limiter, template and schedule in it is gone; "+what, attrs...)
		if k.OnDataLost != nil {
			k.OnDataLost(at)
		}
	}
	k.applied, k.reapplying = false, true // the rest of the check applies it whole, then marks
}
