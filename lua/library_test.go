package lua

import (
	"regexp"
	"strings"
	"testing"
)

func TestLibrary(t *testing.T) {
	l := Library()
	if !regexp.MustCompile(`^limitd_[0-9a-f]{16}$`).MatchString(l.Name) {
		t.Errorf("library name %q", l.Name)
	}
	if first, _, _ := strings.Cut(l.Source, "\n"); first != "#!lua name="+l.Name {
		t.Errorf("first line %q, want the shebang naming the library", first)
	}
	if len(l.Functions) != len(libraryOps) {
		t.Errorf("%d functions for %d operations", len(l.Functions), len(libraryOps))
	}
	for _, op := range libraryOps {
		fn := l.Functions[op]
		if fn != l.Name+"_"+op || strings.Count(l.Source, "redis.register_function('"+fn+"',") != 1 {
			t.Errorf("operation %s: function %q not registered once", op, fn)
		}
		// The function's body is the operation's file.
		body, _ := files.ReadFile(op + ".lua")
		if !strings.Contains(l.Source, "if not rcall then init(true) check_layouts() end\n"+string(body)+"\nend)\n") {
			t.Errorf("operation %s: the function does not run %s.lua after init", op, op)
		}
	}
	// Scripts and library share lib.lua, which reads no global while a
	// library loads: its top level ends by calling init for a script only.
	lib, _ := files.ReadFile("lib.lua")
	if !strings.HasPrefix(l.Source, "#!lua name="+l.Name+"\n"+string(lib)) ||
		!strings.Contains(string(lib), "\nif not redis.register_function then init() end") {
		t.Errorf("the library does not start with lib.lua, or lib.lua does not init scripts")
	}
	if again := Library(); again.Source != l.Source {
		t.Errorf("Library is not deterministic")
	}
}

// TestLibraryOnlyPart: a kind file's library-only part (window.lua's fast
// paths) is in the function library and in no script, and a script's hot
// part holds only the kinds whose fast path scripts take.
func TestLibraryOnlyPart(t *testing.T) {
	var window Kind
	for _, k := range Kinds() {
		if k.Name == "window" {
			window = k
		}
	}
	if !window.fast || !window.libOnly || window.inScriptHot() {
		t.Fatalf("window: fast %v, library-only %v, in a script's hot part %v; want true, true, false",
			window.fast, window.libOnly, window.inScriptHot())
	}
	const part = "local function window_one("
	if !strings.Contains(Library().Source, part) {
		t.Errorf("the library lacks window.lua's fast path")
	}
	for _, op := range ops {
		if src := Source(op); strings.Contains(src, part) || strings.Contains(src, "-- [library only]") {
			t.Errorf("%s: the script holds window.lua's library-only part", op)
		}
	}
	hot, _, _ := strings.Cut(Source(Acquire), "local function rest_of_library(")
	if !strings.Contains(hot, "KINDS.schedule = {") || strings.Contains(hot, "KINDS.window = {") {
		t.Errorf("acquire's hot part: want schedule's file and not window's")
	}
}
