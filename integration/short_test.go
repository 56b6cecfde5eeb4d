package integration

import "testing"

// longTest skips t in a -short run. The quick check (go test -short ./...)
// leaves out the tests that spend tens of seconds of real time on faults,
// fleets of processes and Redis topologies; go test ./... and CI run them.
func longTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a real-time fault, fleet or topology run: left out of -short; go test ./integration/ runs it")
	}
}
