package store

import (
	"runtime"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// TestBatchingOptionStartsNothing: WithBatching only configures; New starts
// one batcher whatever the options, and Close stops every goroutine it
// started (an option given twice used to start two and leak the first).
func TestBatchingOptionStartsNothing(t *testing.T) {
	_, rdb := redistest.Mini(t)
	s := &Store{}
	WithBatching(4)(s)
	if s.batcher != nil || s.batchMax != 4 {
		t.Fatalf("the option alone: batcher %v, max %d", s.batcher, s.batchMax)
	}
	before := runtime.NumGoroutine()
	st := New(rdb, WithBatching(4), WithBatching(8))
	if st.batcher == nil || st.batcher.max != 8 {
		t.Fatalf("New with two WithBatching: %+v", st.batcher)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > before && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond) // a liveness bound: the workers return once Close is done
	}
	if n > before {
		t.Errorf("%d goroutines after Close, %d before New", n, before)
	}
}
