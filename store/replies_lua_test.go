package store

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/limitd/limitd/lua"
)

// The reply codes are written in two languages: each script names the
// codes it answers as lua/lib.lua does, store/replies.go names them the
// same, and this test reads the Lua and compares, number by number. No
// script answers a bare number where a code goes.
func TestReplyCodesMatchLua(t *testing.T) {
	lib := map[string]int64{
		"OK": replyOK, "UPDATED": replyUpdated, "CREATED": replyCreated, "NOT_FOUND": replyNotFound,
		"PERMITS_RANGE": replyPermitsRange, "VERSION_MOVED": replyVersionMoved, "KIND_CHANGE": replyKindChange,
		"OTHER_KIND": replyOtherKind, "NEED_BOUNDS": replyNeedBounds,
		"A_OK": answerOK, "A_NOT_FOUND": answerNotFound, "A_OTHER_KIND": answerOtherKind, "A_COUNTED": answerCounted,
		"A_BOUNDS": answerBounds,
		"R_DENIED": recordDenied, "R_GRANTED": recordGranted, "R_PERMITS_RANGE": recordPermitsRange,
		"R_CHARGED_WITHIN": recordChargedWithin, "R_CHARGED_OVER": recordChargedOver, "R_CHARGE_RANGE": recordChargeRange,
	}
	lease := map[string]int64{"OK": replyOK, "NOT_FOUND": replyNotFound, "NOT_HELD": replyNotHeld, "OTHER_KIND": replyOtherKind}
	for _, c := range []struct {
		script string
		src    string
		want   map[string]int64
	}{
		{"lib.lua", LuaLib(t), lib},
		{"share.lua", lua.Source(lua.Share), lease},
		{"concurrency.lua", lua.Source(lua.Concurrency), lease},
		{"configure_lease.lua", lua.Source(lua.ConfigureLease), map[string]int64{"NOT_FOUND": replyNotFound,
			"VERSION_MOVED": replyVersionMoved, "KIND_CHANGE": replyKindChange, "UPDATED": replyUpdated, "CREATED": replyCreated}},
	} {
		got := luaConstants(c.src)
		for name, want := range c.want {
			v, ok := got[name]
			switch {
			case !ok:
				t.Errorf("%s does not name %s (store/replies.go: %d)", c.script, name, want)
			case v != want:
				t.Errorf("%s: %s = %d, store/replies.go has %d", c.script, name, v, want)
			}
		}
	}
	bare := regexp.MustCompile(`return \{\s*-?[0-9]`)
	for _, op := range lua.Ops() {
		if l := bare.FindString(lua.Source(op)); l != "" {
			t.Errorf("%s.lua answers a bare number where a code goes: %q", op, l)
		}
	}
}

// luaConstants reads the integer locals of a Lua source whose names are in
// capitals: `local NAME = 1` and `local A, B = 1, 2`.
func luaConstants(src string) map[string]int64 {
	out := map[string]int64{}
	re := regexp.MustCompile(`(?m)^local ([A-Z_][A-Z0-9_]*(?:, *[A-Z_][A-Z0-9_]*)*) *= *(-?[0-9]+(?:, *-?[0-9]+)*)\b`)
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		names, vals := strings.Split(m[1], ","), strings.Split(m[2], ",")
		for i := range min(len(names), len(vals)) {
			if v, err := strconv.ParseInt(strings.TrimSpace(vals[i]), 10, 64); err == nil {
				out[strings.TrimSpace(names[i])] = v
			}
		}
	}
	return out
}
