// Package envoyrules holds the Envoy rate limit rules. They come in the
// reference rate limit server's config format (a list under the boot file's
// domains:, see Domain): a domain's tree of keys and values, each level
// matched most specific first (exact value, then the first wildcard pattern,
// then the key alone), a rule applying only at the level of a descriptor's
// last entry. Each rule with a limit is a limitd template (Rules.Templates,
// "envoy.<domain>.<hash>"); a request's counter is an instance of it named
// by the request's values where the rule has none (match.go: counter). A
// rate_limit is the window kind (fixed windows of the unit, aligned to the
// Unix epoch); a descriptor may instead name any limitd rate config
// (limiter:), so that a schedule or smooth limit replaces the window.
// Rules.Counters turns a request's descriptors into core.Counters. It
// imports core and limiter.
package envoyrules
