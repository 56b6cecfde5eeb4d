//go:build !race

package store

// raceDetector: see race_test.go.
const raceDetector = false
