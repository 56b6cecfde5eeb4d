package lua

import (
	"regexp"
	"strings"
	"testing"
)

func TestFold(t *testing.T) {
	src := strings.Join([]string{
		"local FAR = 4503599627370496 -- 2^52",
		"local A_OK, A_NO = 1, -3",
		"local H = '<B' .. 'i7'",
		"local TEXT, SEP = 0, ''",
		"local KEEP = 5",
		"local SMALL = {['0'] = 0}",
		"local function f(x)",
		"  local y = x - A_NO -- A_NO stays in this comment",
		"  return enc(H, A_OK, FAR, 'FAR', KEEP, TEXT)",
		"end",
		"local function init() TEXT, SEP = 1, ' ' end",
		"local function g(KEEP) return KEEP end",
		"  local INNER = 3",
	}, "\n")
	got := strings.Split(fold(src), "\n")
	want := []string{
		"-- local FAR = 4503599627370496 -- 2^52",
		"-- local A_OK, A_NO = 1, -3",
		"-- local H = '<B' .. 'i7'",
		"local TEXT, SEP = 0, ''", // assigned again: a variable
		"local KEEP = 5",          // declared again (a parameter)
		"local SMALL = {['0'] = 0}",
		"local function f(x)",
		"  local y = x - (-3) -- A_NO stays in this comment",
		"  return enc('<Bi7', 1, 4503599627370496, 'FAR', KEEP, TEXT)",
		"end",
		"local function init() TEXT, SEP = 1, ' ' end",
		"local function g(KEEP) return KEEP end",
		"  local INNER = 3", // not at the top level
	}
	if len(got) != len(want) {
		t.Fatalf("fold changed the number of lines: %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}

// TestFoldScripts: the scripts' constants are folded: none of lib.lua's is
// left in a script but in comments.
func TestFoldScripts(t *testing.T) {
	for _, name := range []string{"FAR", "HORIZON", "A_OK", "FORMAT", "HR", "X_LEAN"} {
		for _, op := range []string{Acquire, Grant, Configure} {
			for _, line := range strings.Split(Source(op), "\n") {
				code := line
				if i := commentStart(line); i >= 0 {
					code = line[:i]
				}
				if regexp.MustCompile(`\b` + name + `\b`).MatchString(code) {
					t.Errorf("%s: %s not folded: %s", op, name, line)
					break
				}
			}
		}
	}
}
