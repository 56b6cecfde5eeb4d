package bench

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
)

// Config is one run, as the flags of limitd bench give it (see its usage).
type Config struct {
	// Redis is the shared Redis, for ModePool and ModeDirect. Run does not
	// close it.
	Redis redis.UniversalClient
	// HTTPURL is a limitd server (http://host:port, no trailing slash), for
	// ModeHTTP; with it Redis is not used.
	HTTPURL string
	// Limiter is the limiter (or template instance) to take permits from.
	Limiter string
	// Create, if set, creates or replaces the limiter first; CreateBody is
	// the same config as the PUT body of ModeHTTP.
	Create     *limiter.Config
	CreateBody []byte
	Workers    int           // goroutines taking permits, ≥ 1
	Duration   time.Duration // run for this long; 0: until Permits
	Permits    int64         // run until this many permits; 0: for Duration
	Mode       string        // ModePool, ModeDirect or ModeHTTP
	LogPath    string        // a file for one line per permit; "": none
	JSON       bool          // print the Result as JSON, and no progress
}

// Bench modes.
const (
	ModePool   = "pool"
	ModeDirect = "direct"
	ModeHTTP   = "http"
)

const (
	// benchBackoff is how long a worker waits after a failed call, so that a
	// refused connection does not become a busy loop.
	benchBackoff = 20 * time.Millisecond
	// benchSetupTimeout bounds creating the limiter and the first probes.
	benchSetupTimeout = 10 * time.Second
	// offsetProbes is how many round trips estimate the clock offset before
	// the run (the best of them is kept).
	offsetProbes = 5
)
