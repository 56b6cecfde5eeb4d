package lua

import (
	"strings"
	"testing"
)

// TestSource: every operation has a script; the rate operations hold lib.lua
// (its hot part first), the kind files, what is derived from them and their
// file, and the standalone ones are their file alone.
func TestSource(t *testing.T) {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		src := Source(op)
		body, err := files.ReadFile(op + ".lua")
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if standalone(op) {
			if src != string(body) {
				t.Errorf("%s: standalone script is not its file alone", op)
			}
			continue
		}
		text := scriptText(op)
		hot, rest, _ := strings.Cut(string(lib), restMark)
		if !strings.HasPrefix(text, hot) || !strings.Contains(text, rest) || !strings.Contains(text, string(body)) ||
			src != text {
			t.Errorf("%s: script is not lib.lua and %s.lua", op, op)
		}
	}
	for _, op := range []string{"nope", "lib"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Source(%q) did not panic", op)
				}
			}()
			Source(op)
		}()
	}
}
