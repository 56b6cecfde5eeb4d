package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"maps"
	"strings"
	"sync"
)

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
