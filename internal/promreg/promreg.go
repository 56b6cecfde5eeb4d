// Package promreg registers Prometheus collectors for the front ends (api,
// grpcapi), which share one registry in `limitd serve`: a collector already
// registered there is shared, not registered twice.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register adds c to reg and returns it, or returns the equal collector reg
// holds already (a second front end or handler on the same registry shares
// its series). Any other registration error is a programming error: it
// panics, naming who registers (by).
func Register[C prometheus.Collector](by string, reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
		panic(by + ": registering metrics: " + err.Error())
	}
	return c
}
