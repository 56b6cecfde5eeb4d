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

// add adds the headers to resp (h nil: none), of the last descriptor over
// its limit, else of the first with a limit and the least remaining. The
// reset is its duration_until_reset, by Redis' clock.
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
	reset := int64(wholeSeconds(pick.GetDurationUntilReset().AsDuration()) / time.Second) // nil: 0
	resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}
