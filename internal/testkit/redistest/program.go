package redistest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Program is a testing.TB for a program outside `go test` (the scripts'
// benchmarks against a peer), so that it starts its servers as the tests
// do: a failure prints "name: reason", runs the cleanups and exits 1.
// Only the methods this package and such a program call are implemented.
type Program struct {
	testing.TB
	name     string
	mu       sync.Mutex
	cleanups []func()
}

// NewProgram is the Program of the program name, which its failures name.
func NewProgram(name string) *Program { return &Program{name: name} }

func (p *Program) Name() string { return p.name }
func (p *Program) Helper()      {}

// Cleanup has Close run f, before what was added earlier.
func (p *Program) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}

func (p *Program) TempDir() string {
	dir, err := os.MkdirTemp("", p.name+"-")
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (p *Program) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, p.name+":", strings.TrimSpace(fmt.Sprint(args...)))
	p.Close()
	os.Exit(1)
}

func (p *Program) Fatalf(format string, args ...any) { p.Fatal(fmt.Sprintf(format, args...)) }

// Skip fails: a program has nothing to skip to.
func (p *Program) Skip(args ...any) { p.Fatal(args...) }

// Close runs the cleanups, the latest first.
func (p *Program) Close() {
	p.mu.Lock()
	fs := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// ProcessCPU is a process's CPU time so far, user and system, from
// /proc/PID/stat (Linux).
func ProcessCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')';
	// utime and stime are fields 14 and 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	// In ticks of USER_HZ, 100 on every Linux architecture Go supports.
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
