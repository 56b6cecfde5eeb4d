// Package lua holds limitd's Redis scripts. Each operation is one file, and
// each rate kind is one file (schedule.lua, smooth.lua, window.lua: its
// engine and its parameters in the packed state, registered in lib.lua's
// table of kinds). The script of a rate limiter's operation is the shared
// library lib.lua, the kind files, what this package derives from them
// (every kind's packed layout, see Layouts in lib.lua) and the operation's
// file, so the engine is written once: as a script (EVAL) arranged so that a
// fast path runs little of it (Source), as a function library (FCALL)
// loaded once (Library). The other scripts stand alone (see standalone).
// limiter/ is the reference the scripts must agree with to the nanosecond;
// see lib.lua for how they stay exact in doubles.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"sync"
)

//go:embed *.lua
var files embed.FS

// Names of the operations, one script each.
const (
	Acquire   = "acquire"
	Grant     = "grant"
	Peek      = "peek"
	Release   = "release"
	Reset     = "reset"
	Configure = "configure"
	Delete    = "delete"
	// AcquireAll decides several limiters all or nothing (acquire_all.lua).
	AcquireAll = "acquire_all"
	Bounds     = "bounds" // a calendar window's boundaries (bounds.lua; see window.lua)

	Share          = "share"           // capacity leases of a share limiter (standalone)
	Concurrency    = "concurrency"     // slots of a concurrency limiter (standalone)
	ConfigureLease = "configure_lease" // Put/Patch of a share or concurrency limiter (standalone)
	// Restore undoes an acquire_all write another shard's refusal voided (standalone).
	Restore = "restore"
	// Fixed counts, or reads, fixed windows at Redis' TIME (standalone; see store.Fixed).
	Fixed = "fixed"
	// FixedReset deletes a fixed window counter's current counts (standalone).
	FixedReset = "fixed_reset"
)

// Ops returns the names of every operation, a copy of its own to the caller.
func Ops() []string { return slices.Clone(ops[:]) }

var ops = [...]string{Acquire, Grant, Peek, Release, Reset, Configure, Delete, Bounds, Share, Concurrency, ConfigureLease,
	AcquireAll, Restore, Fixed, FixedReset}

func standalone(op string) bool {
	switch op {
	case Share, Concurrency, ConfigureLease, Restore, Fixed, FixedReset:
		return true
	}
	return false
}

// Source returns the full source of an operation's script (see scriptText),
// or the operation's file alone for a standalone one. It panics on an
// unknown name, a programming error.
func Source(op string) string {
	if !slices.Contains(ops[:], op) {
		panic("lua: no script for operation " + op)
	}
	return sources()[op]
}

var sources = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, op := range ops {
		if standalone(op) {
			m[op] = mustRead(op + ".lua")
		} else {
			m[op] = scriptText(op)
		}
	}
	return m
})

// libraryOps are the operations Library serves.
var libraryOps = [...]string{Acquire, Grant, Peek, Release, Reset}

// Lib is a Redis Function library (Redis ≥ 7: FUNCTION LOAD, FCALL) holding
// the scripts of the rate limiter's calls (acquire, grant, peek, release, reset).
type Lib struct {
	Name      string            // the library's name: limitd_ and a hash of its code
	Source    string            // what FUNCTION LOAD takes
	Functions map[string]string // operation → function name
}

// Library returns the function library of those calls: libSource followed
// by one function per operation, whose body is the operation's file with
// KEYS and ARGV as its arguments. Its top level runs once at FUNCTION LOAD,
// where a script's defines lib.lua's closures on every call. Names carry a
// hash of the code, so limitd versions with different scripts can share a
// server.
func Library() Lib {
	l := library()
	l.Functions = maps.Clone(l.Functions)
	return l
}

var library = sync.OnceValue(func() Lib {
	lib := libSource()
	var body strings.Builder
	body.WriteString(lib)
	bodies := make([]string, len(libraryOps))
	for i, op := range libraryOps {
		bodies[i] = mustRead(op + ".lua")
	}
	sum := sha1.Sum([]byte(lib + strings.Join(bodies, "")))
	name := "limitd_" + hex.EncodeToString(sum[:])[:16]
	l := Lib{Name: name, Functions: map[string]string{}}
	for i, op := range libraryOps {
		fn := name + "_" + op
		l.Functions[op] = fn
		// The library's top level may not call init (see Globals in lib.lua)
		// nor check_layouts: the first call does.
		body.WriteString("\nredis.register_function('" + fn + "', function(KEYS, ARGV)\nif not rcall then init(true) check_layouts() end\n")
		body.WriteString(bodies[i])
		body.WriteString("\nend)\n")
	}
	l.Source = "#!lua name=" + name + "\n" + body.String()
	return l
})
