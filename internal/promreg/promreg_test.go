package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := Register("t", reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	b := Register("t", reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	if a != b {
		t.Fatal("a second registration of an equal collector got a collector of its own")
	}
	defer func() {
		if recover() == nil {
			t.Error("a collector of the same name and another help registered without a panic")
		}
	}()
	Register("t", reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "other"}))
}
