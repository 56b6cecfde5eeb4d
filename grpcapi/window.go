package grpcapi

import (
	"time"

	"github.com/limitd/limitd/core"
)

// decisionOutcome reads a counter's acquire answer. A schedule or smooth
// limit is asked with no wait: granted means now, and a refusal says when
// the same hits could be granted.
func decisionOutcome(_ *rule, d core.Decision) outcome {
	return outcome{granted: d.Granted, retryAfter: time.Duration(d.RetryAfter)}
}

// waitOutcome reads a counter's state for a check of 0 hits: granted when a
// hit would be granted now.
func waitOutcome(_ *rule, w core.WaitInfo) outcome {
	return outcome{granted: w.Delay <= 0, retryAfter: time.Duration(max(w.Delay, 0))}
}
