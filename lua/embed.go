// Package lua holds limitd's Redis scripts. Each operation is one file; every
// script is the shared library lib.lua followed by the operation's file, so
// the engine is written once. limiter/ is the reference the scripts must agree
// with to the nanosecond; see lib.lua for how they stay exact in doubles.
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
)

// Source returns the full source of an operation's script: the library and
// the operation. It panics on an unknown name, which is a programming error.
func Source(op string) string {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic(err)
	}
	body, err := files.ReadFile(op + ".lua")
	if err != nil {
		panic("lua: no script for operation " + op)
	}
	return string(lib) + "\n" + string(body)
}
