package store

import (
	"errors"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// grantReply is a well-formed reply of grant.lua (grant_main in lua/lib.lua).
func grantReply() []any {
	return []any{int64(1), int64(1), int64(1), int64(1_700_000_000_000_000), int64(5), int64(5),
		int64(0), int64(0), int64(0), int64(0), int64(3), int64(1_700_000_000_000_000), int64(0),
		int64(0), int64(1_000_005), int64(1_000_000), int64(0), int64(1), "1.1", "schedule", int64(60)}
}

// TestRepliesGarbled: a short, mistyped or unknown reply is ErrBadReply,
// never a panic and never a zero read as a value.
func TestRepliesGarbled(t *testing.T) {
	t.Parallel()
	if g, err := decodeGrant("n", grantReply()); err != nil || !g.Granted || g.Slice.Whole != 1_000_000 || g.MaxPermits != 60 {
		t.Fatalf("the well-formed grant reply: %+v, %v", g, err)
	}
	garble := map[string]func(v []any) []any{
		"empty":         func([]any) []any { return nil },
		"short":         func(v []any) []any { return v[:12] },
		"one short":     func(v []any) []any { return v[:20] },
		"text for int":  func(v []any) []any { v[15] = "many"; return v },
		"nil element":   func(v []any) []any { v[14] = nil; return v },
		"flag 7":        func(v []any) []any { v[1] = int64(7); return v },
		"den 0":         func(v []any) []any { v[17] = int64(0); return v },
		"max permits 0": func(v []any) []any { v[20] = int64(0); return v },
		"burst garbage": func(v []any) []any { v[18] = "x"; return v },
		"lease kind":    func(v []any) []any { v[19] = "share"; return v },
		"unknown code":  func(v []any) []any { v[0] = int64(9); return v },
		"code as text":  func(v []any) []any { v[0] = "ok"; return v },
	}
	for name, f := range garble {
		g, err := decodeGrant("n", f(grantReply()))
		if name == "empty" || name == "unknown code" || name == "code as text" {
			err = replyErr("grant", "n", f(grantReply()))
		}
		if !errors.Is(err, ErrBadReply) {
			t.Errorf("%s: grant %+v, err %v, want ErrBadReply", name, g, err)
		}
	}
	// The error codes need their second element too.
	for _, v := range [][]any{{int64(replyPermitsRange)}, {int64(replyOtherKind)}, {int64(replyOtherKind), int64(3)}} {
		if err := replyErr("peek", "n", v); !errors.Is(err, ErrBadReply) {
			t.Errorf("reply %v: %v, want ErrBadReply", v, err)
		}
	}
	var fe *limiter.FieldError
	if err := replyErr("grant", "n", []any{int64(replyPermitsRange), int64(60)}); !errors.As(err, &fe) {
		t.Errorf("{-2, 60}: %v, want a FieldError", err)
	}
	if err := replyErr("grant", "n", []any{int64(replyNotFound)}); !errors.Is(err, ErrNotFound) {
		t.Errorf("{-1}: %v, want ErrNotFound", err)
	}
	if err := leaseReplyErr("n", limiter.KindShare, []any{"garbage"}); !errors.Is(err, ErrBadReply) {
		t.Errorf("lease reply garbage: %v, want ErrBadReply", err)
	}
}

// TestAnswersGarbled: acquire.lua's packed answers, short or with unknown
// codes, are ErrBadReply for every request they were to answer.
func TestAnswersGarbled(t *testing.T) {
	t.Parallel()
	for _, v := range []any{
		int64(5),                             // not a string
		"",                                   // empty
		"\x01\x02",                           // a head cut short
		"\x09",                               // an unknown answer code
		"\x04\x09ab",                         // a kind's name cut short
		"1 1700000000000000 3 0",             // text: a head without its position
		"1 1700000000000000 3 0 5 7 0 0 0 0", // text: a record code 7
		"1 1700000000000000 3 0 5 1 0 0",     // text: a record cut short
	} {
		var outs [2]Outcome
		u := (&Store{}).answerUnpacker(v)
		decodeAnswer("n", &u, 2, func(r int, o Outcome) { outs[r] = o.withPermits(1) })
		for r, o := range outs {
			if !errors.Is(o.Err, ErrBadReply) {
				t.Errorf("answer %q: request %d: %+v, want ErrBadReply", v, r, o)
			}
		}
	}
}
