package grpcapi

import (
	"time"

	"github.com/limitd/limitd/core"
)

// decisionOutcome reads a counter's decision. A schedule or smooth limit is
// asked with no wait: granted means now, and a refusal says when the same
// hits could be granted. A window answers what remains in it (Wait) and
// when it ends (Position), on Redis' clock. A refusal in shadow mode comes
// back granted, with Shadow set.
func decisionOutcome(rl *rule, d core.Decision) outcome {
	o := outcome{granted: d.Granted, shadowed: d.Shadow, retryAfter: time.Duration(max(d.RetryAfter, 0))}
	if rl.window {
		o.window = true
		o.limit = int64(rl.limit)
		o.remaining = max(d.Wait, 0)
		o.reset = time.Duration(max(d.Position-d.Now, 0))
	}
	return o
}
