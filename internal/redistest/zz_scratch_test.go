package redistest

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestScratchPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil { t.Fatal(err) }
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	inst := &Instance{t: t, bin: "redis-server", dir: t.TempDir()}
	inst.logPath = inst.dir + "/redis.log"
	inst.mu.Lock()
	err = inst.startLocked(port, nil)
	inst.mu.Unlock()
	t.Logf("err=%v", err)
	if err == nil || !strings.Contains(err.Error(), "port already in use") { t.Fatal("want port taken") }
	// cluster bus taken
	err = func() error { inst.mu.Lock(); defer inst.mu.Unlock(); p, _ := freePort(); return inst.startLocked(p, []string{"--cluster-enabled", "yes", "--cluster-config-file", inst.dir + "/n.conf", "--cluster-port", itoa(port)}) }()
	t.Logf("bus err=%v", err)
	if err == nil || !strings.Contains(err.Error(), "port already in use") { t.Fatal("want port taken (bus)") }
}

func itoa(i int) string { return net.JoinHostPort("", "")[:0] + func() string { s := ""; for i > 0 { s = string(rune('0'+i%10)) + s; i /= 10 }; return s }() }

func TestScratchBadArg(t *testing.T) {
	if os.Getenv("SCRATCH_BAD") == "" { t.Skip() }
	Server(t, "--no-such-option", "1")
}

func TestScratchHang(t *testing.T) {
	if os.Getenv("SCRATCH_HANG") == "" { t.Skip() }
	Server(t)
	Cluster(t)
	time.Sleep(time.Hour)
}
