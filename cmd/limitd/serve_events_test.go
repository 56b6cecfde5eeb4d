package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// An event stream open when limitd serve stops ends as the shutdown starts
// (it would never end on its own): serve stops without waiting out its
// shutdown timeout, and leaves no goroutine behind, the streams' sampling
// loop included. A stream answers with its headers at once, also when there
// is no limiter to sample.
func TestServeShutdownEndsStreams(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base, logs, stop := startServe(t, map[string]string{})
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(base + "/v1/events?interval=100ms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /v1/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- sc.Err()
	}()
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if err := <-ended; err != nil {
		t.Errorf("the stream did not end cleanly: %v", err)
	}
	if l := logs.String(); strings.Contains(l, "did not finish in time") || !strings.Contains(l, "stopped") {
		t.Errorf("serve waited for the stream, or did not stop:\n%s", l)
	}
}
