// Package redistest starts real, throwaway Redis servers for tests.
//
// Each call to [Server] or [Cluster] launches its own redis-server child
// processes on free loopback ports, with persistence disabled and a per-test
// temporary directory, and registers cleanups that kill them. Tests therefore
// never share state with each other or with a Redis that happens to be running
// on the machine (such as one on the default port 6379), which this package
// never touches.
//
// When the Redis binaries are not on PATH the test is skipped, so contributors
// without Redis can still run the suite; CI sets LIMITD_REQUIRE_REDIS=1 to turn
// that skip into a failure, see [Require].
package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// RequireEnv names the environment variable that turns a missing Redis,
	// or any tool a test needs (Missing), from a skip into a failure (CI).
	RequireEnv = "LIMITD_REQUIRE_REDIS"

	missingMsg = "%s not installed: install redis-server and redis-tools (apt-get install -y redis-server redis-tools) to run this test"

	startTimeout = 20 * time.Second // a busy machine's redis-server may take seconds
	// Picking a port and binding it are not atomic, so another process can
	// grab the port in between; a few fresh picks make that race harmless.
	startAttempts = 5
	logTailLines  = 30
)

// Require skips the test unless every named binary is on PATH (redis-server
// when none is named). If LIMITD_REQUIRE_REDIS=1 it fails the test instead,
// so CI cannot mistake a runner without Redis for a passing one.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	if len(bins) == 0 {
		bins = []string{"redis-server"}
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			Missing(t, fmt.Sprintf(missingMsg, bin))
			// Only reached with a testing.TB fake whose Skip/Fatal return.
			return
		}
	}
}

// Missing skips t for want of a tool, msg saying which and how to install
// it; with LIMITD_REQUIRE_REDIS=1 (CI, which has every tool the tests use)
// it fails t instead.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
}

// Instance is one redis-server child process owned by a test.
type Instance struct {
	t       testing.TB
	bin     string
	dir     string
	logPath string
	port    int
	args    []string // the extra flags of the first start, for Restart
	// conf, when set, is a config file given as the first argument (a
	// Sentinel's), and ready the log line that says this kind of server listens.
	conf, ready string
	// wrap, when set, is the command that runs redis-server (ServerUnder).
	wrap []string

	mu            sync.Mutex // a concurrent Stop sees no half-started process
	proc          *process
	adminPassword string // the default user's, once AddUser gave it one
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// Server starts a standalone redis-server with persistence disabled on a free
// 127.0.0.1 port and stops it when the test ends. args are appended to the
// command line after the defaults, so they can override them.
func Server(t testing.TB, args ...string) *Instance {
	t.Helper()
	Require(t, "redis-server")
	return launch(t, nil, func(string, int) ([]string, error) { return args, nil })
}

// ServerUnder is Server run by a tool: wrap is its command and flags
// (valgrind --tool=callgrind ...), to which redis-server and its arguments
// are appended.
func ServerUnder(t testing.TB, wrap []string, args ...string) *Instance {
	t.Helper()
	Require(t, "redis-server", wrap[0])
	return launch(t, func(i *Instance) { i.wrap = wrap }, func(string, int) ([]string, error) { return args, nil })
}

// launch starts redis-server with flags from extra, given the instance
// directory and the candidate port (cluster flags embed them); setup, if
// not nil, prepares the instance before its first start.
func launch(t testing.TB, setup func(*Instance), extra func(dir string, port int) ([]string, error)) *Instance {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	dir := t.TempDir()
	inst := &Instance{t: t, bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log")}
	if setup != nil {
		setup(inst)
	}
	t.Cleanup(inst.Stop) // after t.TempDir: runs before the directory is removed

	inst.mu.Lock()
	defer inst.mu.Unlock()
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: pick a free port: %v", err)
		}
		args, err := extra(dir, port)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		err = inst.startLocked(port, args)
		if err == nil {
			inst.port, inst.args = port, args
			return inst
		}
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("redistest: %v", err)
		}
		lastErr = err
	}
	t.Fatalf("redistest: no usable port after %d attempts: %v", startAttempts, lastErr)
	return nil
}

// Addr returns the server address as "127.0.0.1:port".
func (i *Instance) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(i.port)) }

// Port returns the TCP port the server listens on; it survives Restart.
func (i *Instance) Port() int { return i.port }

// Pid is the running server's process id (the tool's, under ServerUnder),
// 0 when it is stopped.
func (i *Instance) Pid() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.proc == nil {
		return 0
	}
	return i.proc.cmd.Process.Pid
}

// Client returns a new client for this server, closed when the test ends.
func (i *Instance) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: i.Addr()})
	i.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server with SIGKILL, so nothing is flushed to disk, and
// waits for it to exit. Calling it on a stopped server does nothing.
func (i *Instance) Stop() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.proc == nil {
		return
	}
	_ = i.proc.cmd.Process.Kill()
	<-i.proc.done
	i.proc = nil
}

// Restart kills the server and starts a new one on the same port with an
// empty dataset, which is what a Redis restart without persistence looks like
// to clients. Like t.Fatal it must be called from the test goroutine.
func (i *Instance) Restart() {
	i.t.Helper()
	i.Stop()
	i.Start()
}

// Start starts a stopped server again, on the same port with the flags it
// was first started with and an empty dataset: a node restarted "as it was"
// configured (a demoted master comes back believing it is a master). It does
// nothing to a running server. Like t.Fatal it must be called from the test
// goroutine.
func (i *Instance) Start() {
	i.t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.proc != nil {
		return
	}
	if err := i.startLocked(i.port, i.args); err != nil {
		i.t.Fatalf("redistest: start on port %d: %v", i.port, err)
	}
}

// Running reports whether the server process is up.
func (i *Instance) Running() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.proc != nil
}

var errPortTaken = errors.New("port already in use")

func (i *Instance) startLocked(port int, extra []string) error {
	// A fresh data directory per start: an empty dataset even after a SAVE.
	dataDir, err := os.MkdirTemp(i.dir, "data-")
	if err != nil {
		return err
	}
	var args []string
	if i.conf != "" {
		args = append(args, i.conf)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dataDir,
		"--daemonize", "no",
	)
	args = append(args, extra...)

	logFile, err := os.OpenFile(i.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// Diagnostics look at this start's output only.
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	argv := append(slices.Clone(i.wrap), i.bin) // under ServerUnder, the tool runs redis-server
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Dir = i.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logFile.Close() // the child holds its own
	if err != nil {
		return fmt.Errorf("start %s: %w", i.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ready := cmp.Or(i.ready, readyLine)
	bound := func() bool { // this start's log says it
		data, err := os.ReadFile(i.logPath)
		return err == nil && logStart <= int64(len(data)) && strings.Contains(string(data[logStart:]), ready)
	}
	if hidesNotices(extra) {
		// The ready line is a notice; without it the process_id check in
		// waitReady is the only guard against talking to someone else.
		bound = func() bool { return true }
	}
	if err := waitReady(addr, p, startTimeout, bound); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		tail := i.logTail(logStart)
		if strings.Contains(tail, "Address already in use") || errors.Is(err, errForeignServer) {
			err = fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return fmt.Errorf("redis-server on %s: %w\n--- %s (tail) ---\n%s", addr, err, i.logPath, tail)
	}
	i.proc = p
	return nil
}

var errForeignServer = errors.New("a Redis not started by this test answered")

// readyLine is logged by redis-server only after all its listening sockets,
// including the cluster bus, are bound.
const readyLine = "Ready to accept connections"

// waitReady polls until the server answers PING and proves, via its
// process_id, that it is the child we just started. bound gates the first
// connection: until our child has bound the port, whatever answers there is
// not ours and must not be contacted.
func waitReady(addr string, p *process, timeout time.Duration, bound func() bool) error {
	deadline := time.Now().Add(timeout)
	var err error = errors.New("not listening yet")
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited during startup: %v", p.cmd.ProcessState)
		default:
		}
		if bound() {
			var pid int
			if pid, err = probe(addr); err == nil {
				if pid != p.cmd.Process.Pid {
					return fmt.Errorf("%w (pid %d, want %d)", errForeignServer, pid, p.cmd.Process.Pid)
				}
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING reply within %v: %v", timeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// hidesNotices reports whether the caller raised the log level above notice,
// which suppresses readyLine.
func hidesNotices(args []string) bool {
	hidden := false
	for j, a := range args {
		// Redis applies the last occurrence, so keep scanning.
		if strings.TrimLeft(a, "-") == "loglevel" && j+1 < len(args) {
			lvl := strings.ToLower(args[j+1])
			hidden = lvl == "warning" || lvl == "nothing"
		}
	}
	return hidden
}

// probe asks the server at addr for its process_id, with a client of its
// own: a client's pool slows its dials after a refused one, which would add
// about a second to every start while the server is still binding.
func probe(addr string) (pid int, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 250 * time.Millisecond, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// FreePort is a loopback port nobody listens on now, never 6379 (where a
// Redis the tests must not touch may listen).
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if port == 6379 {
		// Holding this listener open forces the next pick elsewhere.
		defer l.Close()
		return freePort()
	}
	return port, l.Close()
}

func (i *Instance) logTail(from int64) string {
	data, err := os.ReadFile(i.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if from > 0 && from <= int64(len(data)) {
		data = data[from:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
