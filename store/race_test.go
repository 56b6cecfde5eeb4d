//go:build race

package store

// raceDetector is whether the tests run under the race detector (go test
// -race), which makes every step several times slower (see diffOps).
const raceDetector = true
