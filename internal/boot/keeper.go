package boot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/limitd/limitd/core"
)

// Keeper keeps a boot file applied and re-applies the parts of it Redis
// lost. Every Interval it checks each limiter and template of the file
// (core.Service.Lost: one pipelined round trip per node), so a cluster
// shard restarted empty gets its own limiters back, and a limiter the index
// no longer lists is listed again. It also reloads the file.
//
// Set the options before Boot; Boot and Run are called by one goroutine,
// which owns the Keeper.
type Keeper struct {
	Service  *core.Service
	Log      *slog.Logger
	Interval time.Duration // between checks
	Timeout  time.Duration // for one check and apply

	// ReloadEvery is how often the file is read again (0: never), Hup a
	// signal to read it at once. A changed file that parses replaces the
	// one applied (Reloaded is told); a bad one is logged once and the
	// one applied stays.
	ReloadEvery time.Duration
	Hup         <-chan os.Signal
	Reloaded    func(*File)

	file    *File
	applied bool   // the file was applied once: what is missing now, Redis lost
	down    bool   // Redis failed the last check: log the outage once
	bad     string // what was last logged as bad: a content's sum or a read error
}

// NewKeeper returns a keeper of f over svc that logs to log, checking every
// second with a timeout of 10 s; change the options before Boot.
func NewKeeper(f *File, svc *core.Service, log *slog.Logger) *Keeper {
	return &Keeper{file: f, Service: svc, Log: log, Interval: time.Second, Timeout: 10 * time.Second}
}

// Boot applies the file once, within Timeout. When Redis cannot take it,
// it logs so and Run applies it once Redis answers.
func (k *Keeper) Boot(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, k.Timeout)
	defer cancel()
	f := k.file
	if err := f.Apply(ctx, k.Service); err != nil {
		k.down = true
		k.Log.Warn("could not apply the boot file; it will be applied once Redis answers", "file", f.Path, "err", err)
		return
	}
	k.applied = true
	k.Log.Info("applied the boot file", "file", f.Path, "limiters", len(f.Limiters), "templates", len(f.Templates),
		"domains", f.Rules.Domains(), "rules", f.Rules.Len())
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
		case <-reload:
			k.reload(ctx)
		case <-k.Hup:
			k.reload(ctx)
		}
	}
}

// reload reads the file again; when its content changed and is valid, it
// becomes the file kept applied. Limiters and templates the new file no
// longer has stay in Redis (delete them through the API).
func (k *Keeper) reload(ctx context.Context) {
	data, err := os.ReadFile(k.file.Path)
	if err != nil {
		if k.bad != err.Error() {
			k.bad = err.Error()
			k.Log.Error("cannot read the boot file again; keeping the one applied", "file", k.file.Path, "err", err)
		}
		return
	}
	raw := sha256.Sum256(data)
	sum := hex.EncodeToString(raw[:])
	if sum == k.file.Sum || sum == k.bad {
		return
	}
	nb, err := Parse(k.file.Path, data)
	if err != nil {
		k.bad = sum
		k.Log.Error("the boot file changed and is invalid; keeping the one applied", "err", err)
		return
	}
	k.bad = ""
	k.file, k.applied = nb, false
	k.check(ctx) // applies it
	k.Log.Info("reloaded the boot file", "file", nb.Path, "limiters", len(nb.Limiters), "templates", len(nb.Templates),
		"domains", nb.Rules.Domains(), "rules", nb.Rules.Len(), "applied", k.applied)
	if k.Reloaded != nil {
		k.Reloaded(nb)
	}
}

// check re-applies what Redis lost of the file. While Redis (or a shard) is
// down it logs once, when the outage starts, and once more when it is back;
// what a reachable shard lost is re-applied meanwhile.
func (k *Keeper) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, k.Timeout)
	defer cancel()
	if !k.applied {
		if err := k.file.Apply(ctx, k.Service); err == nil {
			k.applied = true
			k.Log.Warn("applied the boot file", "file", k.file.Path, "limiters", len(k.file.Limiters), "templates", len(k.file.Templates))
		}
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
