//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no portable equivalent of Pdeathsig, so outside Linux only
// the test cleanups stop the servers.
func sysProcAttr() *syscall.SysProcAttr { return nil }
