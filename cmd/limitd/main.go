// Command limitd is the limitd binary: `limitd serve` (the default) runs the
// HTTP API over a shared Redis, and other subcommands register themselves in
// the command table (see register) from their own files.
//
// Every subcommand gets a context that ends on SIGINT or SIGTERM; a second
// signal kills the process the usual way, so a stuck shutdown can still be
// interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
)

// A command is one subcommand of limitd.
type command struct {
	name    string
	summary string // one line in the command list of limitd --help
	usage   string // limitd help NAME, limitd NAME -h; ends with a newline
	// run does the work with the arguments after the command's name. An
	// error is printed as one line and the process exits 1 (2 for a usageError).
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

// register adds a subcommand; files of this package call it from init.
func register(c *command) {
	if _, dup := commands[c.name]; dup || c.name == "help" {
		panic("limitd: command " + c.name + " registered twice (help is built in)")
	}
	commands[c.name] = c
}

// defaultCommand runs when limitd is started without a command.
const defaultCommand = "serve"

// usageError is a mistake on the command line: it is printed with a pointer to
// the command's help, and the process exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // the first signal starts a graceful stop; the next one kills
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == refBinary {
		// Started as the reference server's binary (/bin/ratelimit), as
		// Envoy Gateway and the reference's manifests start it.
		args = append([]string{refBinary}, args...)
	}
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name, rest := defaultCommand, args
	if len(args) > 0 {
		name, rest = args[0], args[1:]
	}
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, mainUsage())
			return 0
		}
		c, ok := commands[rest[0]]
		if !ok {
			fmt.Fprintf(stderr, "limitd: unknown command %q; run 'limitd help' for the list\n", rest[0])
			return 2
		}
		fmt.Fprint(stdout, c.usage)
		return 0
	case "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(stderr, "limitd: unknown flag %s; limitd takes a command first, run 'limitd help'\n", name)
		} else {
			fmt.Fprintf(stderr, "limitd: unknown command %q; run 'limitd help' for the list\n", name)
		}
		return 2
	}
	if len(rest) == 1 && slices.Contains([]string{"-h", "-help", "--help"}, rest[0]) {
		fmt.Fprint(stdout, c.usage)
		return 0
	}
	err := c.run(ctx, rest, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "limitd %s: %s\nRun 'limitd help %s' for usage.\n", c.name, oneLine(ue.msg), c.name)
		return 2
	default:
		fmt.Fprintf(stderr, "limitd: %s\n", oneLine(err.Error()))
		return 1
	}
}

// oneLine keeps an error on one line, for log collectors and crash loops.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(strings.TrimSpace(s))
}

// mainUsage is the text of limitd --help: the commands, then serve's environment.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("limitd — a shared rate-limiter service: many processes share one schedule in Redis.\n\n")
	b.WriteString("Usage:\n  limitd [command] [arguments]\n\nCommands:\n")
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		s := commands[n].summary
		if n == defaultCommand {
			s += " (the default)"
		}
		fmt.Fprintf(&b, "  %-9s %s\n", n, s)
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "help", "show this help, or a command's: limitd help <command>")
	b.WriteString("\nRun 'limitd help <command>' or 'limitd <command> -h' for a command's details.\n\n")
	b.WriteString(envHelp())
	return b.String()
}

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
