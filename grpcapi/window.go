package grpcapi

import (
	"time"

	"github.com/limitd/limitd/core"
)

// decisionOutcome reads a counter's decision. A schedule or smooth limit is
// asked with no wait: granted means now, and a refusal says when the same
// hits could be granted. A refusal in shadow mode comes back granted, with
// Shadow set.
func decisionOutcome(_ *rule, d core.Decision) outcome {
	return outcome{granted: d.Granted, shadowed: d.Shadow, retryAfter: time.Duration(max(d.RetryAfter, 0))}
}
