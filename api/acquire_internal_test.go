package api

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// acquireBodies are read by hand (scanAcquire) or fall back to decodeStrict;
// both must read them the same way.
var acquireBodies = []string{
	`{}`, ` { } `, "\t{\n}\r\n", `{"permits":1}`, `{"permits":3,"max_wait":"1ms","block":true}`,
	`{"block":false,"max_wait":"250ms","permits":2}`, `{"permits":-0}`, `{"permits":0}`,
	`{"permits":9223372036854775807}`, `{"permits":-9223372036854775808}`, `{"permits":9223372036854775808}`,
	`{"permits":-9223372036854775809}`, `{"permits":99999999999999999999}`, `{"permits":01}`, `{"permits":1.0}`,
	`{"permits":1e2}`, `{"permits":-}`, `{"permits":"1"}`, `{"permits":null}`, `{"permits":1,"permits":2}`,
	`{"Permits":1}`, `{"permits":1,}`, `{,"permits":1}`, `{"permits":1}x`, `{"permits":1}{}`, `{"permits" 1}`,
	`{"max_wait":"-1s"}`, `{"max_wait":"2562047h47m16.854775807s"}`, `{"max_wait":"2562047h47m16.854775808s"}`,
	`{"max_wait":"1µs"}`, `{"max_wait":"1\u00b5s"}`, `{"max_wait":"x"}`, `{"max_wait":""}`, `{"max_wait":5}`,
	`{"max_wait":"1s","max_wait":"2s"}`, `{"block":true,"block":true}`, `{"block":truex}`, `{"block":tru}`,
	`{"block":"true"}`, `{"block":null}`, `{"other":1}`, `{"perm\u0069ts":1}`, `[]`, `null`, `1`, `"x"`,
	`{"permits":1`, `{"permits":`, `{"`, `{`, "{\"permits\":1}\x00", "\ufeff{}", `{"a":{"b":1}}`,
}

func FuzzAcquireBody(f *testing.F) {
	for _, b := range acquireBodies {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		b := []byte(body)
		got, ok := scanAcquire(b)
		want, err := decodeAcquireStrict(b)
		if ok && err != nil {
			t.Fatalf("%q: scanAcquire reads %+v, decodeStrict refuses it: %v", body, got, err)
		}
		if ok && got != want {
			t.Fatalf("%q: scanAcquire reads %+v, decodeStrict %+v", body, got, want)
		}
		// What the handler answers is decodeAcquire's: the same as
		// decodeStrict's, errors included.
		dec, derr := decodeAcquire(b)
		if dec != want || !sameProblem(derr, err) {
			t.Fatalf("%q: decodeAcquire = %+v, %v; decodeStrict %+v, %v", body, dec, derr, want, err)
		}
	})
}

// The common bodies are read by hand, not by the fallback.
func TestScanAcquireReadsCommonBodies(t *testing.T) {
	for _, b := range []string{`{}`, `{"permits":1}`, `{"permits":3,"max_wait":"100ms","block":true}`, `{"block":false}`} {
		if _, ok := scanAcquire([]byte(b)); !ok {
			t.Errorf("%s: falls back to decodeStrict", b)
		}
	}
}

func sameProblem(a, b error) bool {
	var pa, pb *problem
	if !errors.As(a, &pa) || !errors.As(b, &pb) {
		return a == nil && b == nil
	}
	return pa.Problem == pb.Problem
}

// Random bodies built from the pieces of acquire bodies, most of them
// well-formed: the hand-written reader and decodeStrict agree on each.
func TestScanAcquireAgreesRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	keys := []string{`"permits"`, `"max_wait"`, `"block"`, `"Permits"`, `"x"`, `"perm\u0069ts"`}
	values := []string{`1`, `0`, `-0`, `-1`, `01`, `1.5`, `1e3`, `9223372036854775807`, `9223372036854775808`,
		`-9223372036854775808`, `"1s"`, `"-5ms"`, `"1.5h"`, `"x"`, `"1\u00b5s"`, `"1µs"`, `""`, `true`, `false`, `null`,
		`"true"`, `{}`, `[]`, `tru`}
	space := []string{"", "", "", " ", "\n", "\t", "\r\n "}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	for range 20000 {
		var b strings.Builder
		b.WriteString(pick(space) + "{" + pick(space))
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(pick(space) + "," + pick(space))
			}
			b.WriteString(pick(keys) + pick(space) + ":" + pick(space) + pick(values))
		}
		b.WriteString(pick(space) + "}" + pick(space))
		body := b.String()
		if r.IntN(10) == 0 { // break it somewhere
			i := r.IntN(len(body) + 1)
			body = body[:i] + pick([]string{"", ",", "}", "x", `"`}) + body[min(len(body), i+r.IntN(2)):]
		}
		got, gerr := decodeAcquire([]byte(body))
		want, werr := decodeAcquireStrict([]byte(body))
		if got != want || !sameProblem(gerr, werr) {
			t.Fatalf("%q: decodeAcquire = %+v, %v; decodeStrict %+v, %v", body, got, gerr, want, werr)
		}
	}
}
