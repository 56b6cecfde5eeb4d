//go:build linux

package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the test binary dies
// without running its cleanups (a -timeout panic, os.Exit, a crash), so an
// aborted run cannot leave servers behind. Pdeathsig is tied to the forking OS
// thread, which the Go runtime only retires when a goroutine exits while
// locked to it; that is rare enough in tests to accept.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
