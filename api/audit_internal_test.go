package api

import (
	"testing"
	"time"
)

// failureLog: the first failure of a problem is logged, the next ones within
// failureWindow are counted, and the first after it is logged with that
// count; another problem has its own run.
func TestFailureLog(t *testing.T) {
	var f failureLog
	t0 := time.Unix(1_800_000_000, 0)
	step := func(problem string, at time.Duration, ok bool, leftOut int) {
		t.Helper()
		if gotOK, gotLeft := f.log(problem, t0.Add(at)); gotOK != ok || gotLeft != leftOut {
			t.Errorf("%s at %v: logged %v with %d left out, want %v with %d", problem, at, gotOK, gotLeft, ok, leftOut)
		}
	}
	step("unavailable", 0, true, 0)
	step("unavailable", time.Second, false, 0)
	step("unavailable", 2*time.Second, false, 0)
	step("timeout", 3*time.Second, true, 0)
	step("unavailable", failureWindow-time.Nanosecond, false, 0)
	step("unavailable", failureWindow, true, 3)
	step("unavailable", failureWindow+time.Second, false, 0)
	step("unavailable", 3*failureWindow, true, 1)
}
