package store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client defaults of NewClient. A rate limiter must answer quickly or not at
// all: when Redis is gone, callers should learn it (ErrUnavailable) in well
// under a second, not after go-redis' defaults of 5 s timeouts, three retries
// and five dial attempts 100 ms apart for each of them.
const (
	DialTimeout  = 500 * time.Millisecond
	ReadTimeout  = 500 * time.Millisecond
	WriteTimeout = 500 * time.Millisecond
	MaxRetries   = 1 // one retry of a failed command, with one dial attempt each
)

// NewClient returns a Redis client for a LIMITD_REDIS_URL:
//
//   - redis://[user:password@]host:port[/db][?options] or rediss://… (TLS), as
//     go-redis' ParseURL reads them: a single node;
//   - host:port,host:port,… : the seed nodes of a Redis Cluster;
//   - a lone host:port: a single node.
//
// Timeouts the URL does not set are short (DialTimeout, ReadTimeout,
// WriteTimeout, MaxRetries), and context deadlines are honoured. Bad input is
// an error wrapping ErrInvalid that names the part at fault. The caller owns
// the client and closes it.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	s := strings.TrimSpace(rawURL)
	if s == "" {
		return nil, fmt.Errorf("%w: redis URL is empty: want redis://host:port, rediss://host:port or host:port,host:port", ErrInvalid)
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		if strings.Contains(s, ",") {
			return nil, fmt.Errorf("%w: redis URL %q: a cluster is a list of host:port without a scheme", ErrInvalid, redact(s))
		}
		if scheme != "redis" && scheme != "rediss" {
			return nil, fmt.Errorf("%w: redis URL %q: scheme %q must be redis or rediss", ErrInvalid, redact(s), scheme)
		}
		opt, err := redis.ParseURL(s)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // without the URL, which may hold a password
			}
			return nil, fmt.Errorf("%w: redis URL %q: %v", ErrInvalid, redact(s), err)
		}
		if _, err := checkAddr(opt.Addr); err != nil {
			return nil, fmt.Errorf("%w: redis URL %q: %v", ErrInvalid, redact(s), err)
		}
		opt.DialTimeout = orDefault(opt.DialTimeout, DialTimeout)
		opt.ReadTimeout = orDefault(opt.ReadTimeout, ReadTimeout)
		opt.WriteTimeout = orDefault(opt.WriteTimeout, WriteTimeout)
		if opt.MaxRetries == 0 {
			opt.MaxRetries = MaxRetries
		}
		opt.DialerRetries = 1
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
	parts := strings.Split(s, ",")
	addrs := make([]string, 0, len(parts))
	for i, p := range parts {
		a, err := checkAddr(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%w: redis address %d of %q: %v", ErrInvalid, i+1, s, err)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 1 {
		return redis.NewClient(&redis.Options{
			Addr: addrs[0], DialTimeout: DialTimeout, ReadTimeout: ReadTimeout,
			WriteTimeout: WriteTimeout, MaxRetries: MaxRetries, DialerRetries: 1, ContextTimeoutEnabled: true,
		}), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, DialTimeout: DialTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, MaxRetries: MaxRetries, DialerRetries: 1, ContextTimeoutEnabled: true,
	}), nil
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
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q must be a number from 1 to 65535", a, port)
	}
	return a, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// redact hides a password in a URL for error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if at := strings.LastIndex(s, "@"); at >= 0 {
			if i := strings.Index(s, "://"); i >= 0 && i < at {
				return s[:i+3] + "xxxxx" + s[at:]
			}
		}
		return s
	}
	return u.Redacted()
}
