package grpcapi

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Headers names the response headers an answer adds for Envoy to pass to
// the client (response_headers_to_add), as the reference server adds them
// with LIMIT_RESPONSE_HEADERS_ENABLED: the limit, the remainder and the
// seconds until the reset of the descriptor closest to its limit.
type Headers struct {
	Limit, Remaining, Reset string
}

// add adds the headers to resp (h nil: none). The descriptor they describe
// is the one over its limit (the last, when several are), else the one
// with a limit and the least remaining (the first, on a tie); without a
// descriptor that has a limit, none. The reset is the status's
// duration_until_reset, which Redis's clock decided (whole seconds, rounded
// up; 0 for a schedule or smooth rule that is not over), where the
// reference reads its own clock.
func (h *Headers) add(resp *rlv3.RateLimitResponse) {
	if h == nil {
		return
	}
	var pick *rlv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.Statuses {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == rlv3.RateLimitResponse_OVER_LIMIT:
			pick = st
		case pick == nil || pick.Code != rlv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pick.LimitRemaining:
			pick = st
		}
	}
	if pick == nil {
		return
	}
	reset := int64(0)
	if d := pick.DurationUntilReset; d != nil {
		reset = int64(wholeSeconds(d.AsDuration()) / time.Second)
	}
	resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}
