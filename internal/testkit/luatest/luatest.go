// Package luatest gives tests the Lua that every rate limiter operation
// starts with, to call its functions on their own.
package luatest

import (
	"strings"
	"testing"

	"github.com/limitd/limitd/lua"
)

// Lib is lua/lib.lua with the kind files and what is derived from them: the
// function library's source (lua.Library) between its "#!lua" line and its
// first function, which is where the library keeps it.
func Lib(t testing.TB) string {
	t.Helper()
	_, src, _ := strings.Cut(lua.Library().Source, "\n")
	lib, _, ok := strings.Cut(src, "\nredis.register_function(")
	if !ok {
		t.Fatal("lua.Library's source registers no function")
	}
	return lib + "\n"
}
