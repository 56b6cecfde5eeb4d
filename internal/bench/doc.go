// Package bench is the library behind limitd bench, the load and accuracy
// harness (the README's "limitd bench"). Workers take permits from one limiter as fast as
// it lets them, and the bench reports the rate they got, each permit's
// lateness (start − scheduled) and how many round trips it cost. Several
// bench processes on one limiter, each with a permit log, show whether the
// shared schedule holds across processes: merge the logs and count.
//
// One concept a file: run.go orchestrates a run, worker.go is one worker,
// source.go connects and picks the permit source of the mode (pool.go,
// direct.go, httpsource.go over internal/httpjson), report.go the result and
// progress, histogram.go the lateness histogram, permitlog.go the log.
// Scheduled times are converted to the local clock with the offset estimator
// the client uses (internal/clockoffset).
//
// Layer: internal, under cmd/limitd (which keeps the flags, the usage and the
// wiring); it imports client, store, limiter and internal/clockoffset.
package bench
