// Package lua holds limitd's Redis scripts. Each operation is one file; the
// script of a rate limiter's operation is the shared library lib.lua followed
// by the operation's file, so the engine is written once. The share and
// concurrency scripts (and their configure) stand alone (see Standalone).
// limiter/ is the reference the scripts must agree with to the nanosecond; see
// lib.lua for how they stay exact in doubles.
package lua

import (
	"embed"
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

	Share          = "share"           // capacity leases of a share limiter (standalone)
	Concurrency    = "concurrency"     // slots of a concurrency limiter (standalone)
	ConfigureLease = "configure_lease" // Put/Patch of a share or concurrency limiter (standalone)
)

// Ops are the names of every operation.
var Ops = []string{Acquire, Grant, Peek, Release, Reset, Configure, Delete, Share, Concurrency, ConfigureLease}

// Standalone are the operations whose script is their file alone, without
// lib.lua.
var Standalone = map[string]bool{Share: true, Concurrency: true, ConfigureLease: true}

// Source returns the full source of an operation's script: the library and
// the operation, or the operation alone for a Standalone one. It panics on an
// unknown name, which is a programming error.
func Source(op string) string {
	body, err := files.ReadFile(op + ".lua")
	if err != nil || op == "lib" {
		panic("lua: no script for operation " + op)
	}
	if Standalone[op] {
		return string(body)
	}
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic(err)
	}
	return string(lib) + "\n" + string(body)
}
