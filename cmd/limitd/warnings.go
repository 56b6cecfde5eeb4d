package main

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/limitd/limitd/internal/refenv"
)

// otherVars are LIMITD_ variables limitd reads outside serve's config
// (ctl's, and the tests' redistest.RequireEnv).
var otherVars = []string{"LIMITD_URL", "LIMITD_REQUIRE_REDIS"}

// knownVars are every LIMITD_ variable limitd reads.
func knownVars() []string {
	var names []string
	for _, f := range configFields() {
		names = append(names, f.Tag.Get("env"))
	}
	return append(names, otherVars...)
}

// maxSuggestDistance is how many edits from a known variable one is suggested.
const maxSuggestDistance = 4

// warnUnknownVars warns once about each LIMITD_ variable of environ that
// limitd does not read, with the known one closest to it: a misspelt
// LIMITD_ADMIN_TOKN would otherwise leave limiters open to change.
func warnUnknownVars(log *slog.Logger, environ map[string]string) {
	known := knownVars()
	for _, k := range slices.Sorted(maps.Keys(environ)) {
		if !strings.HasPrefix(k, "LIMITD_") || slices.Contains(known, k) {
			continue
		}
		best, dist := closest(k, known)
		if dist <= maxSuggestDistance {
			log.Warn(k+" is not a variable limitd reads; did you mean "+best+"?", "variable", k, "did_you_mean", best)
		} else {
			log.Warn(k+" is not a variable limitd reads (see limitd help serve)", "variable", k)
		}
	}
}

// closest is the first of names nearest to s in edit distance, and that distance.
func closest(s string, names []string) (string, int) {
	best, dist := "", -1
	for _, n := range names {
		if d := editDistance(s, n); dist < 0 || d < dist {
			best, dist = n, d
		}
	}
	return best, dist
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// embeddedRefused is why serve must not start on its embedded Redis although
// LIMITD_REDIS_URL is empty (nil: nothing says Redis was meant): N replicas
// would each run on a Redis of its own and allow N times every limit.
func embeddedRefused(environ map[string]string) error {
	names := slices.Sorted(maps.Keys(environ))
	known := knownVars()
	for _, k := range names {
		if environ[k] == "" || !strings.HasPrefix(k, "LIMITD_") || slices.Contains(known, k) {
			continue
		}
		if best, d := closest(k, known); strings.Contains(k, "REDIS") || best == "LIMITD_REDIS_URL" && d <= maxSuggestDistance {
			return fmt.Errorf("%s: not a variable limitd reads, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port instead", k)
		}
	}
	for _, k := range names {
		if environ[k] != "" && refRedisVar(k) {
			return fmt.Errorf("%s: the reference server's variable, which limitd serve does not read, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port, or run limitd ratelimit, which reads %s", k, k)
		}
	}
	return nil
}

// refRedisVar reports whether name is one of the reference server's Redis
// variables (REDIS_URL, REDIS_AUTH, REDIS_SOCKET_TYPE, ...).
func refRedisVar(name string) bool {
	return strings.HasPrefix(name, "REDIS_") && refenv.Known(name)
}
