package lua

import (
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// TestKindsAreLimiters: the scripts' rate kinds (one file each) are
// limiter's, with the same codes and parameters in the same order, so that
// store/ can send and read a kind's parameters by limiter.KindInfo.Params.
func TestKindsAreLimiters(t *testing.T) {
	var want []limiter.KindInfo
	for _, k := range limiter.Kinds() {
		if k.Class == limiter.ClassRate {
			want = append(want, k)
		}
	}
	got := Kinds()
	if len(got) != len(want) {
		t.Fatalf("%d Lua kinds, %d rate kinds in limiter", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(k Kind) bool { return k.Name == string(w.Name) })
		if i < 0 {
			t.Errorf("kind %s: no lua/%s.lua", w.Name, w.Name)
			continue
		}
		k := got[i]
		if k.Code != w.Code {
			t.Errorf("kind %s: code %d in Lua, %d in limiter", k.Name, k.Code, w.Code)
		}
		var lp, wp []string
		for _, f := range k.Params {
			lp = append(lp, f.Name)
		}
		for _, q := range w.Params {
			wp = append(wp, q.Name)
		}
		if !slices.Equal(lp, wp) {
			t.Errorf("kind %s: parameters %v in Lua, %v in limiter", k.Name, lp, wp)
		}
		// the scripts take kind, the slice, max_permits, the kind's, version
		if n := k.ParamNames(); n[0] != "kind" || n[len(n)-1] != "version" || !slices.Equal(n[len(n)-1-len(lp):len(n)-1], lp) {
			t.Errorf("kind %s: params %v", k.Name, n)
		}
	}
	// The layouts as they are (FORMAT 4): a change is a new format.
	for name, want := range map[string]int{"schedule": 144, "smooth": 168, "window": 149} {
		i := slices.IndexFunc(got, func(k Kind) bool { return k.Name == name })
		if i < 0 || got[i].Size() != want {
			t.Errorf("kind %s: x is not %d bytes", name, want)
		}
	}
}

// TestKindsStayInTheirFiles: no script names a rate kind but its own file;
// the others dispatch through KINDS (see Kinds in lib.lua).
func TestKindsStayInTheirFiles(t *testing.T) {
	names, err := fs.Glob(files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	comment := regexp.MustCompile(`--.*`)
	for _, k := range Kinds() {
		quoted := regexp.MustCompile(`['"]` + k.Name + `['"]|\.` + k.Name + `\b`)
		for _, file := range names {
			if file == k.Name+".lua" {
				continue
			}
			for i, line := range strings.Split(mustRead(file), "\n") {
				if quoted.MatchString(comment.ReplaceAllString(line, "")) {
					t.Errorf("%s:%d names kind %s: %s", file, i+1, k.Name, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestConstantsAreLimiters: the bounds the scripts keep are limiter's.
func TestConstantsAreLimiters(t *testing.T) {
	for _, c := range []struct {
		file, expr string
		want       int64
	}{
		{"lib.lua", `local HORIZON = (\d+)`, limiter.Horizon},
		{"lib.lua", `local MAX_AHEAD = 2 \* HORIZON`, limiter.MaxAhead / 2 / limiter.Horizon},
		{"schedule.lua", `local AT_ONCE = (\d+)`, limiter.AtOnce},
		{"window.lua", `local FULL, MAX_COUNT = (\d+), \d+`, limiter.MaxWindowLimit},
		{"window.lua", `local FULL, MAX_COUNT = \d+, (\d+)`, limiter.MaxWindowCount},
	} {
		m := regexp.MustCompile(c.expr).FindStringSubmatch(mustRead(c.file))
		switch {
		case m == nil:
			t.Errorf("%s: no %s", c.file, c.expr)
		case len(m) > 1 && m[1] != strconv.FormatInt(c.want, 10):
			t.Errorf("%s: %s is %s, limiter's %d", c.file, c.expr, m[1], c.want)
		case len(m) == 1 && c.want != 1:
			t.Errorf("%s: %s, but limiter.MaxAhead is not 2 × Horizon", c.file, c.expr)
		}
	}
}
