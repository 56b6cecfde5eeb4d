package store

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client defaults of NewClient. A rate limiter must answer quickly or not at
// all: when Redis is gone, callers should learn it (ErrUnavailable) in well
// under a second, not after go-redis' 5 s timeouts and retries.
const (
	DialTimeout  = 500 * time.Millisecond
	ReadTimeout  = 500 * time.Millisecond
	WriteTimeout = 500 * time.Millisecond
	MaxRetries   = 1 // one retry of a failed command, with one dial attempt each (never of a script or function call: see once)
)

// NewClient returns a Redis client for a LIMITD_REDIS_URL, whose form gives
// the topology (docs/configuration.md, "Redis URLs"): redis[s]://host:port
// (or a lone host:port) for one node, ?master_name=NAME for the master the
// Sentinels name, ?addr=host:port… or host:port,host:port… for a cluster
// (database 0; a single seed is repeated: redis://node:7000?addr=node:7000).
// go-redis' own parsers read it, so any of their options may be a query
// parameter. Timeouts the URL does not set are short (DialTimeout, ...),
// context deadlines are honoured, and the client follows failovers
// (failover.go). Bad input is a *URLError. The caller owns the client.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	return NewClientTLS(rawURL, nil)
}

// NewClientTLS is NewClient with what a URL cannot say of TLS: the
// certificates of tlsConfig (a client certificate, a private CA as
// RootCAs) and its InsecureSkipVerify are added to those of a rediss://
// URL; nil adds nothing. Its other fields are not read.
func NewClientTLS(rawURL string, tlsConfig *tls.Config) (redis.UniversalClient, error) {
	s := strings.TrimSpace(rawURL)
	if s == "" {
		return nil, &URLError{Reason: "redis URL is empty: want redis://host:port, rediss://host:port or host:port,host:port"}
	}
	if tlsConfig != nil && !strings.HasPrefix(s, "rediss://") {
		return nil, &URLError{Reason: "TLS settings need a rediss:// URL"}
	}
	rdb, err := newClient(s, tlsConfig)
	if err != nil {
		return nil, &URLError{Reason: scrub(err.Error(), s)}
	}
	return rdb, nil
}

// URLError is a Redis URL (or the TLS settings beside it) NewClient cannot
// use; it matches ErrInvalid. Reason names the part at fault, without a
// password.
type URLError struct {
	Reason string
}

func (e *URLError) Error() string { return ErrInvalid.Error() + ": " + e.Reason }

// Is makes every URLError match ErrInvalid.
func (e *URLError) Is(target error) bool { return target == ErrInvalid }

func newClient(s string, tlsConfig *tls.Config) (redis.UniversalClient, error) {
	scheme, _, isURL := strings.Cut(s, "://")
	if !isURL {
		return newFromList(s)
	}
	if scheme != "redis" && scheme != "rediss" {
		return nil, fmt.Errorf("redis URL %q: scheme %q must be redis or rediss", RedactURL(s), scheme)
	}
	u, err := url.Parse(s)
	if err == nil && strings.Contains(u.Host, ",") || err != nil && strings.Contains(s, ",redis") {
		return nil, fmt.Errorf("redis URL %q: name further nodes with addr=host:port; a comma-separated list is host:port without a scheme", RedactURL(s))
	}
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %v", RedactURL(s), parseErr(err))
	}
	bad := func(err error) error { return fmt.Errorf("redis URL %q: %v", RedactURL(s), parseErr(err)) }
	q := u.Query()
	switch {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(s)
		if err == nil && opt.MasterName == "" {
			err = errors.New("master_name is empty: name the master the Sentinels monitor")
		}
		if err == nil {
			err = checkAddrs(opt.SentinelAddrs)
		}
		if err != nil {
			return nil, bad(err)
		}
		shortTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.MaxRetries, &opt.DialerRetries, &opt.ContextTimeoutEnabled)
		addTLS(opt.TLSConfig, tlsConfig)
		return followSentinel(redis.NewFailoverClient(opt)), nil
	case q.Has("addr"):
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return nil, bad(fmt.Errorf("database %q: a cluster has only database 0", db))
		}
		opt, err := redis.ParseClusterURL(s)
		if err == nil {
			err = checkAddrs(opt.Addrs)
		}
		if err != nil {
			return nil, bad(err)
		}
		shortTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.MaxRetries, &opt.DialerRetries, &opt.ContextTimeoutEnabled)
		addTLS(opt.TLSConfig, tlsConfig)
		return followCluster(redis.NewClusterClient(opt)), nil
	default:
		opt, err := redis.ParseURL(s)
		if err == nil {
			err = checkAddrs([]string{opt.Addr})
		}
		if err != nil {
			return nil, bad(err)
		}
		shortTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.MaxRetries, &opt.DialerRetries, &opt.ContextTimeoutEnabled)
		addTLS(opt.TLSConfig, tlsConfig)
		return redis.NewClient(opt), nil
	}
}

// addTLS adds the certificates and verification of extra to the TLS config
// a rediss:// URL made.
func addTLS(dst, extra *tls.Config) {
	if dst == nil || extra == nil {
		return
	}
	dst.Certificates = append(dst.Certificates, extra.Certificates...)
	if extra.RootCAs != nil {
		dst.RootCAs = extra.RootCAs
	}
	dst.InsecureSkipVerify = dst.InsecureSkipVerify || extra.InsecureSkipVerify
}

func newFromList(s string) (redis.UniversalClient, error) {
	parts := strings.Split(s, ",")
	addrs := make([]string, 0, len(parts))
	for i, p := range parts {
		a, err := checkAddr(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("redis address %d of %q: %v", i+1, RedactURL(s), err)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 1 {
		opt := &redis.Options{Addr: addrs[0]}
		shortTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.MaxRetries, &opt.DialerRetries, &opt.ContextTimeoutEnabled)
		return redis.NewClient(opt), nil
	}
	opt := &redis.ClusterOptions{Addrs: addrs}
	shortTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.MaxRetries, &opt.DialerRetries, &opt.ContextTimeoutEnabled)
	return followCluster(redis.NewClusterClient(opt)), nil
}

// parseErr drops the URL, which may hold a password, from url.Parse's errors.
func parseErr(err error) error {
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		return uerr.Err
	}
	return err
}

func checkAddrs(addrs []string) error {
	for _, a := range addrs {
		if _, err := checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// checkAddr checks one host:port and returns it as given.
func checkAddr(a string) (string, error) {
	if a == "" {
		return "", fmt.Errorf("empty address: want host:port")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port", a)
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", a)
	}
	if strings.ContainsAny(host, "@/?#") {
		return "", fmt.Errorf("%q is not host:port: credentials need a URL, redis://user:password@host:port", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q must be a number from 1 to 65535", a, port)
	}
	return a, nil
}

// shortTimeouts fills in NewClient's short timeouts and retries where a URL
// left them unset, and has the client honour context deadlines (go-redis'
// option types share the fields but no type).
func shortTimeouts(dial, read, write *time.Duration, retries, dialerRetries *int, ctxTimeout *bool) {
	*dial = cmp.Or(*dial, DialTimeout)
	*read = cmp.Or(*read, ReadTimeout)
	*write = cmp.Or(*write, WriteTimeout)
	*retries = cmp.Or(*retries, MaxRetries)
	*dialerRetries = cmp.Or(*dialerRetries, 1)
	*ctxTimeout = true
}

const redacted = "xxxxx" // stands in for a hidden secret

// secretParam matches a query parameter that carries a secret (password=,
// sentinel_password=, …) up to the end of its value.
var secretParam = regexp.MustCompile(`(?i)([?&;][^=&;#]*(?:password|passwd|pass|pwd|secret|token)[^=&;#]*=)[^&;#]*`)

// RedactURL returns a LIMITD_REDIS_URL fit for a log line or an error: the
// password of its user info (user:xxxxx@; all of it without a colon, which
// go-redis reads as a password) and every query parameter whose name speaks of
// a password (password=, sentinel_password=) is replaced by xxxxx. It works
// on any text, a URL that does not parse included.
func RedactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		// Everything between the scheme and the last @ is user info, even
		// where a password holds an unescaped / ? # or @.
		if at := strings.LastIndex(s, "@"); at > i+3 {
			// Keep the user name; go-redis reads a lone name as a password.
			keep := ""
			if user, _, ok := strings.Cut(s[i+3:at], ":"); ok {
				keep = user + ":"
			}
			s = s[:i+3] + keep + redacted + s[at:]
		}
	} else if at := strings.LastIndex(s, "@"); at >= 0 {
		// A host list has no user info; whatever precedes an @ may be one.
		s = redacted + s[at:]
	}
	return secretParam.ReplaceAllString(s, "${1}"+redacted)
}

// scrub removes from msg every secret that raw (a URL) holds, wherever a
// parser may have echoed it.
func scrub(msg, raw string) string {
	for _, sec := range secrets(raw) {
		msg = strings.ReplaceAll(msg, sec, redacted)
	}
	return msg
}

// secrets are the strings of raw that may be passwords, longest first: what
// lies between a delimiter and an '@' (user info, wherever a parser may have
// cut it), and the values of password parameters, as written and decoded.
func secrets(raw string) []string {
	seen := map[string]bool{}
	add := func(v string) {
		// (a secret of a few characters would blot out the message)
		if len(v) < 4 || v == redacted || strings.Contains(v, "://") {
			return
		}
		seen[v] = true
		if d, err := url.PathUnescape(v); err == nil && len(d) >= 4 {
			seen[d] = true
		}
		if d, err := url.QueryUnescape(v); err == nil && len(d) >= 4 {
			seen[d] = true
		}
	}
	// A password may hold an unescaped / ? or #, where url.Parse ends the
	// host and quotes what it took for a port: cut there too.
	base := 0 // user info starts after the scheme
	if k := strings.Index(raw, "://"); k >= 0 {
		base = k + 3
	}
	lastAt := strings.LastIndexByte(raw, '@')
	for j := base; j <= lastAt; j++ {
		if strings.IndexByte("@/?#", raw[j]) < 0 {
			continue
		}
		add(raw[base:j])
		for i := base; i < j; i++ {
			if strings.IndexByte(":/,=&?;", raw[i]) >= 0 {
				add(raw[i+1 : j])
			}
		}
	}
	for _, m := range secretParam.FindAllStringSubmatchIndex(raw, -1) {
		add(raw[m[3]:m[1]])
	}
	out := slices.Collect(maps.Keys(seen))
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
