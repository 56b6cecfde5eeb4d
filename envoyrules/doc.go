// Package envoyrules holds the Envoy rate limit rules, in the reference
// rate limit server's config format (Domain): a domain's tree of keys and
// values, matched most specific first. Each rule with a limit is a limitd
// template (Rules.Templates); a request's counter is an instance of it
// named by the request's values (match.go). A rate_limit is a fixed window
// of its unit; a descriptor may instead name any limitd rate config.
// Rules.Counters turns a request's descriptors into core.Counters. It
// imports core and limiter.
package envoyrules
