// Package lua holds limitd's Redis scripts. Each operation is one file, and
// each rate kind is one file (schedule.lua, smooth.lua, window.lua: its engine
// and its parameters in the packed state, registered in lib.lua's table of
// kinds). bounds.lua gives a calendar window the boundaries that only Go can
// compute (store/bounds.go).
// The script of a rate limiter's operation is the shared library lib.lua, the
// kind files, what this package derives from them once (every kind's packed
// layout, written out: see Layouts in lib.lua), and the
// operation's file, so the engine is written once; as a script (EVAL) it is
// arranged so that a call a fast path answers runs little of it (Source), as
// a function library (FCALL) it is loaded once (Library). The share and concurrency
// scripts (and their configure) stand alone (see Standalone), and so do
// restore.lua, which undoes acquire_all.lua's write on one cluster slot when
// another slot of the same call refused, and fixed.lua and fixed_reset.lua,
// which count and reset fixed windows kept in plain integers (store/fixed.go)
// at Redis' TIME. limiter/ is the
// reference the scripts must agree with to the nanosecond; see lib.lua for how
// they stay exact in doubles.
package lua

import (
	"embed"
	"slices"
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

// ops are the names of every operation: an array, which no caller can change.
var ops = [...]string{Acquire, Grant, Peek, Release, Reset, Configure, Delete, Bounds, Share, Concurrency, ConfigureLease,
	AcquireAll, Restore, Fixed, FixedReset}

// standalone reports whether op's script is its file alone, without lib.lua.
func standalone(op string) bool {
	switch op {
	case Share, Concurrency, ConfigureLease, Restore, Fixed, FixedReset:
		return true
	}
	return false
}

// Source returns the full source of an operation's script: the code of
// lib.lua, the kind files, what is derived from them and the operation,
// arranged so that a fast path runs little of it (see scriptText); or the
// operation alone for a standalone one. It panics on an unknown name, which
// is a programming error.
func Source(op string) string {
	if !slices.Contains(ops[:], op) {
		panic("lua: no script for operation " + op)
	}
	return sources()[op]
}

// sources are every operation's script, made once.
var sources = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, op := range ops {
		body := mustRead(op + ".lua")
		if standalone(op) {
			m[op] = body
		} else {
			m[op] = scriptText(op)
		}
	}
	return m
})
