package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	register(&command{
		name:    "version",
		summary: "print the version and the Go version it was built with",
		usage:   "usage: limitd version\n\nPrints limitd's version (set with -ldflags \"-X main.version=...\"), its\nVCS revision when known, and the Go version and platform it was built for.\n",
		run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
			if len(args) > 0 {
				return usageErrorf("version takes no arguments (got %q)", args[0])
			}
			fmt.Fprintln(stdout, versionString())
			return nil
		},
	})
}

// versionString is "limitd <version> [(<revision>)] <go version> <os>/<arch>".
func versionString() string {
	s := "limitd " + version
	if rev := vcsRevision(); rev != "" {
		s += " (" + rev + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// vcsRevision is the commit the binary was built from, when the go command
// recorded it (not with -trimpath builds outside a checkout, nor in tests).
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev[:min(12, len(rev))] + dirty
}
