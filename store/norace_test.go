//go:build !race

package store_test

// raceDetector: see race_test.go.
const raceDetector = false
