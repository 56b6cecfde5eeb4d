// Package bench is the library behind limitd bench, the load and accuracy
// harness (the README's "limitd bench"). Workers take permits from one limiter as fast as
// it lets them, and the bench reports the rate they got, each permit's
// lateness (start − scheduled) and how many round trips it cost. Several
// bench processes on one limiter, each with a permit log, show whether the
// shared schedule holds across processes: merge the logs and count.
// Scheduled times are converted to the local clock with the offset estimator
// the client uses (internal/clockoffset); cmd/limitd keeps the flags.
package bench
