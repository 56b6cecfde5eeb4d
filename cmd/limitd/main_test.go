package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help", "-help"} {
		code, out, errOut := runCmd(t, arg)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d, stderr %q", arg, code, errOut)
		}
		for _, want := range []string{"Usage:", "serve ", "version ", "help ", "(the default)", "LIMITD_ADDR", "LIMITD_LOG_LEVEL"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: help lacks %q:\n%s", arg, want, out)
			}
		}
		for name := range commands {
			if !strings.Contains(out, "  "+name+" ") {
				t.Errorf("%s: help lacks the command %s", arg, name)
			}
		}
	}
}

func TestCommandHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "serve"}, {"serve", "-h"}, {"serve", "--help"}} {
		code, out, _ := runCmd(t, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: limitd [serve]") || !strings.Contains(out, "LIMITD_REDIS_URL") ||
			!strings.Contains(out, "limiters:") {
			t.Errorf("%v: exit %d:\n%s", args, code, out)
		}
	}
	if code, _, errOut := runCmd(t, "help", "nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		code, out, _ := runCmd(t, arg)
		if code != 0 || !strings.HasPrefix(out, "limitd dev") || !strings.Contains(out, runtime.Version()) ||
			strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d, %q", arg, code, out)
		}
	}
	if code, _, errOut := runCmd(t, "version", "x"); code != 2 || !strings.Contains(errOut, "version takes no arguments") {
		t.Errorf("version x: exit %d, %q", code, errOut)
	}
}

func TestUnknownCommandAndFlag(t *testing.T) {
	if code, _, errOut := runCmd(t, "frobnicate"); code != 2 || errOut != "limitd: unknown command \"frobnicate\"; run 'limitd help' for the list\n" {
		t.Errorf("exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "--addr"); code != 2 || !strings.Contains(errOut, "unknown flag --addr") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "serve", "--addr=:80"); code != 2 || !strings.Contains(errOut, "serve takes no arguments") {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

// A bad variable ends limitd (serve is the default command) with exit 1 and
// exactly one line on stderr naming it.
func TestBadEnvironmentOneLine(t *testing.T) {
	for _, tc := range []struct{ key, val, want string }{
		{"LIMITD_LOG_LEVEL", "loud", `limitd: LIMITD_LOG_LEVEL: must be one of debug, info, warn, error (got "loud")` + "\n"},
		{"LIMITD_REDIS_URL", "ftp://example:1", `limitd: LIMITD_REDIS_URL: redis URL "ftp://example:1": scheme "ftp" must be redis or rediss` + "\n"},
		{"LIMITD_REDIS_URL", "a:1,b", `limitd: LIMITD_REDIS_URL: `},
		{"LIMITD_CONFIG", "/nonexistent/limitd.yaml", "limitd: LIMITD_CONFIG: open /nonexistent/limitd.yaml: no such file or directory\n"},
		{"LIMITD_CONFIG", writeFile(t, "b.yaml", "limiters:\n  x: {rate: 1, brust: 2}\n"), `limitd: LIMITD_CONFIG: `},
		{"LIMITD_ADDR", "0.0.0.0:1", "limitd: LIMITD_ADDR: 0.0.0.0:1 is reachable from other machines"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Setenv(tc.key, tc.val)
			code, out, errOut := runCmd(t)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", code, out, errOut, tc.want)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\nb\r\nc\n"); got != "a; b; c" {
		t.Errorf("oneLine = %q", got)
	}
}
