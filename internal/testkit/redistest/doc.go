// Package redistest starts real, throwaway Redis servers for tests.
//
// Each call to [Server] or [Cluster] launches its own redis-server child
// processes on free loopback ports, with persistence disabled and a per-test
// temporary directory, and registers cleanups that kill them. Tests therefore
// never share state with each other or with a Redis that happens to be running
// on the machine (such as one on the default port 6379), which this package
// never touches.
//
// When the Redis binaries are not on PATH the test is skipped, so contributors
// without Redis can still run the suite; CI sets LIMITD_REQUIRE_REDIS=1 to turn
// that skip into a failure, see [Require].
package redistest
