package main

// The HTTP examples of the README and docs/, run with curl: see readme_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// curlStep is a curl command of the HTTP examples and the answer the README
// shows after it.
type curlStep struct {
	line       int
	cmd        string
	status     int // 0: any 2xx
	statusLine int
	headers    []shownHeader
	body       string // the shown JSON, its lines joined with \n
	bodyLine   int
	sleep      time.Duration // a sleep command instead of curl: the Redis clock moves this far
}

type shownHeader struct {
	name, value string
	line        int
}

var (
	shAssign    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	shownStatus = regexp.MustCompile(`^HTTP/[0-9.]+ ([0-9]{3})\b`)
	shownHeadRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9-]*): (.*)$`)
	threeDigits = regexp.MustCompile(`^[0-9]{3}$`)
	shSleep     = regexp.MustCompile(`^sleep [0-9.]+( |$)`)
)

// parseHTTPBlock reads an sh block of the HTTP examples: assignments (the
// preamble of every command), comments, curl commands and the output lines
// after each.
func parseHTTPBlock(b mdBlock, ps *readmeProblems) (preamble string, steps []curlStep) {
	var cur *curlStep
	for i := 0; i < len(b.lines); i++ {
		n := b.line + i
		raw := b.lines[i]
		trimmed := strings.TrimSpace(raw)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			cur = nil
		case shAssign.MatchString(raw):
			code, _ := splitComment(raw)
			preamble += code + "\n"
			cur = nil
		case shSleep.MatchString(raw):
			code, _ := splitComment(raw)
			sec, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(code, "sleep")), 64)
			if err != nil || sec <= 0 {
				ps.add(n, "sleep: want a number of seconds")
			}
			steps = append(steps, curlStep{line: n, cmd: code, sleep: time.Duration(sec * float64(time.Second))})
			cur = nil
		case strings.HasPrefix(raw, "curl "):
			code, comment := splitComment(raw)
			for strings.HasSuffix(code, "\\") && i+1 < len(b.lines) {
				i++
				c2, cm2 := splitComment(b.lines[i])
				code += "\n" + c2 // sh joins the lines
				comment = cm2
			}
			steps = append(steps, curlStep{line: n, cmd: code})
			cur = &steps[len(steps)-1]
			switch {
			case threeDigits.MatchString(comment):
				cur.status, _ = strconv.Atoi(comment)
				cur.statusLine = n
			case strings.HasPrefix(comment, "{") || strings.HasPrefix(comment, "["):
				cur.body, cur.bodyLine = comment, n
			}
		case cur == nil || !isOutput(raw):
			cur = nil
			if !notRun(trimmed) {
				ps.add(n, "%q is neither a curl command, an assignment, a comment nor an output line after a command; run it or list it in readmeNotRun", trimmed)
			}
		default:
			code, _ := splitComment(raw)
			if m := shownStatus.FindStringSubmatch(code); m != nil && cur.body == "" {
				cur.status, _ = strconv.Atoi(m[1])
				cur.statusLine = n
			} else if m := shownHeadRE.FindStringSubmatch(code); m != nil && cur.body == "" {
				cur.headers = append(cur.headers, shownHeader{m[1], strings.TrimSpace(m[2]), n})
			} else {
				if cur.body == "" {
					cur.bodyLine = n
				} else {
					cur.body += "\n"
				}
				cur.body += code
			}
		}
	}
	return preamble, steps
}

// isOutput tells an output line from a command: JSON, its continuation, a
// status line or a header.
func isOutput(l string) bool {
	return strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "{") ||
		strings.HasPrefix(l, "[") || strings.HasPrefix(l, `"`) || shownStatus.MatchString(l) || shownHeadRE.MatchString(l)
}

// curlrc makes every curl of the examples quiet on success, bounded in time,
// direct (no proxy) and followed by its status, without changing a command.
const curlrc = `silent
show-error
max-time = 20
noproxy = "*"
write-out = "\n@@readme-status %{http_code}\n"
`

// runCurlSteps runs the steps in order against base. mini's clock moves
// readmeStep after each command, and by the time a sleep command names
// instead of sleeping.
func runCurlSteps(t *testing.T, base string, mini *miniredis.Miniredis, now *time.Time, preamble string, steps []curlStep, blockLine int, ps *readmeProblems) {
	t.Helper()
	if !strings.Contains(preamble, readmeBaseVar) {
		ps.add(blockLine, "the block does not set %s, which the test rewrites to its own address", readmeBaseVar)
		return
	}
	preamble = strings.Replace(preamble, readmeBaseVar, "B="+base, 1)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".curlrc"), []byte(curlrc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CURL_HOME=" + home, "LC_ALL=C"}
	for _, s := range steps {
		if s.sleep > 0 { // the reader waits; the test moves the clock
			*now = now.Add(s.sleep)
			continue
		}
		if !strings.Contains(s.cmd, "$B") || strings.Contains(s.cmd, "://") {
			// Only $B is rewritten: any other address is not the test's.
			ps.add(s.line, "not run: a command must reach limitd as $B, and no other address")
			continue
		}
		mini.SetTime(*now)
		*now = now.Add(readmeStep)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "sh", "-c", preamble+s.cmd)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			ps.add(s.line, "%s: %v: %s", s.cmd, err, strings.TrimSpace(stderr.String()))
			continue
		}
		t.Logf("%s: %s\n%s", docPos(s.line), s.cmd, strings.TrimSpace(stdout.String()))
		checkAnswer(s, stdout.String(), ps)
	}
}

// checkAnswer compares what curl printed with what the README shows.
func checkAnswer(s curlStep, out string, ps *readmeProblems) {
	i := strings.LastIndex(out, readmeStatus)
	if i < 0 {
		ps.add(s.line, "curl printed no status (is ~/.curlrc read?): %q", out)
		return
	}
	status, _ := strconv.Atoi(strings.TrimSpace(out[i+len(readmeStatus):]))
	body := out[:i]
	header := http.Header{}
	if strings.HasPrefix(body, "HTTP/") {
		head, rest, _ := strings.Cut(body, "\r\n\r\n")
		body = rest
		for _, l := range strings.Split(head, "\r\n")[1:] {
			if k, v, ok := strings.Cut(l, ":"); ok {
				header.Add(k, strings.TrimSpace(v))
			}
		}
	}
	switch {
	case s.status != 0 && status != s.status:
		ps.add(s.statusLine, "shows status %d; the answer to %s was %d: %s", s.status, docPos(s.line), status, body)
	case s.status == 0 && s.body == "" && (status < 200 || status > 299):
		ps.add(s.line, "shows no error; the answer was %d: %s", status, body)
	}
	for _, h := range s.headers {
		got := header.Values(h.name)
		switch {
		case len(got) == 0:
			ps.add(h.line, "shows header %s; the answer has none (-i prints headers)", h.name)
		case strings.EqualFold(h.name, "Retry-After"): // a time: seconds
			if v, err := strconv.Atoi(got[0]); err != nil || v < 0 {
				ps.add(h.line, "%s: %q is not a number of seconds", h.name, got[0])
			}
		case got[0] != h.value:
			ps.add(h.line, "shows %s: %s; the answer has %q", h.name, h.value, got[0])
		}
	}
	if s.body == "" {
		if s.status == http.StatusNoContent && body != "" {
			ps.add(s.statusLine, "shows 204; the answer has a body: %s", body)
		}
		return
	}
	want, err := parseSketch(s.body)
	if err != nil {
		line := s.bodyLine
		if se := (*sketchError)(nil); errors.As(err, &se) {
			line += lineOf(s.body, se.off)
		}
		ps.add(line, "the shown output is not JSON (with ... and \"<placeholders>\"): %v", err)
		return
	}
	if s.status == 0 && want.kind == 'o' {
		// A problem body shows its status.
		if st := want.fields["status"]; st != nil && st.kind == 'n' {
			if v, err := strconv.Atoi(st.text); err == nil && v != status {
				ps.add(s.bodyLine+lineOf(s.body, st.off), "shows status %d; the answer to %s was %d: %s", v, docPos(s.line), status, body)
			}
		} else if status < 200 || status > 299 {
			ps.add(s.bodyLine, "shows a success; the answer to %s was %d: %s", docPos(s.line), status, body)
		}
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var got any
	if err := dec.Decode(&got); err != nil {
		ps.add(s.bodyLine, "shows JSON; the answer to %s is not: %v: %q", docPos(s.line), err, body)
		return
	}
	want.compare(got, "", s, ps)
}

// lineOf is how many lines into text the offset is.
func lineOf(text string, off int) int {
	return strings.Count(text[:min(off, len(text))], "\n")
}

// sketch is JSON as the README shows it: "..." for more keys, any value or
// more elements, "<placeholder>" for any string.
type sketch struct {
	kind   byte // o object, a array, s string, n number, b true/false, z null, * any, S any string
	off    int  // where it starts in the shown text
	text   string
	keys   []string
	fields map[string]*sketch
	elems  []*sketch
	open   bool // an object or array with ... at its end
}

type sketchError struct {
	off int
	msg string
}

func (e *sketchError) Error() string { return e.msg }

func parseSketch(s string) (*sketch, error) {
	p := &sketchParser{s: s}
	v, err := p.value()
	if err == nil {
		p.ws()
		if p.i < len(s) {
			err = p.fail("unexpected %q after the value", s[p.i:])
		}
	}
	return v, err
}

type sketchParser struct {
	s string
	i int
}

func (p *sketchParser) fail(format string, a ...any) error {
	return &sketchError{p.i, fmt.Sprintf(format, a...)}
}

func (p *sketchParser) ws() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *sketchParser) eat(tok string) bool {
	p.ws()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

var sketchNumber = regexp.MustCompile(`^-?[0-9][0-9.eE+-]*`)

func (p *sketchParser) value() (*sketch, error) {
	p.ws()
	v := &sketch{off: p.i}
	rest := p.s[p.i:]
	switch {
	case strings.HasPrefix(rest, "..."):
		p.i += 3
		v.kind = '*'
	case strings.HasPrefix(rest, "{"):
		p.i++
		v.kind, v.fields = 'o', map[string]*sketch{}
		for !p.eat("}") {
			if len(v.keys) > 0 && !p.eat(",") {
				return nil, p.fail("want , or } in an object")
			}
			if p.eat("...") {
				v.open = true
				if !p.eat("}") {
					return nil, p.fail("want } after ...")
				}
				break
			}
			p.ws()
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			if !p.eat(":") {
				return nil, p.fail("want : after %q", k)
			}
			f, err := p.value()
			if err != nil {
				return nil, err
			}
			if _, dup := v.fields[k]; dup {
				return nil, p.fail("key %q shown twice", k)
			}
			v.keys, v.fields[k] = append(v.keys, k), f
		}
	case strings.HasPrefix(rest, "["):
		p.i++
		v.kind = 'a'
		for !p.eat("]") {
			if len(v.elems) > 0 && !p.eat(",") {
				return nil, p.fail("want , or ] in an array")
			}
			if p.eat("...") {
				v.open = true
				if !p.eat("]") {
					return nil, p.fail("want ] after ...")
				}
				break
			}
			e, err := p.value()
			if err != nil {
				return nil, err
			}
			v.elems = append(v.elems, e)
		}
	case strings.HasPrefix(rest, `"`):
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		v.kind, v.text = 's', s
		if len(s) > 2 && s[0] == '<' && s[len(s)-1] == '>' {
			v.kind = 'S'
		}
	case strings.HasPrefix(rest, "true"), strings.HasPrefix(rest, "false"), strings.HasPrefix(rest, "null"):
		v.kind, v.text = 'b', rest[:strings.IndexAny(rest+",", ",}] \n")]
		if v.text == "null" {
			v.kind = 'z'
		}
		p.i += len(v.text)
	default:
		m := sketchNumber.FindString(rest)
		if m == "" {
			return nil, p.fail("want a value at %q", rest)
		}
		if _, err := strconv.ParseFloat(m, 64); err != nil {
			return nil, p.fail("bad number %q", m)
		}
		v.kind, v.text = 'n', m
		p.i += len(m)
	}
	return v, nil
}

// str reads a JSON string at p.i.
func (p *sketchParser) str() (string, error) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", p.fail("want a string")
	}
	j := p.i + 1
	for ; j < len(p.s) && p.s[j] != '"'; j++ {
		if p.s[j] == '\\' {
			j++
		}
	}
	if j >= len(p.s) {
		return "", p.fail("unterminated string")
	}
	var s string
	if err := json.Unmarshal([]byte(p.s[p.i:j+1]), &s); err != nil {
		return "", p.fail("string: %v", err)
	}
	p.i = j + 1
	return s, nil
}

// compare reports where got differs from what the sketch shows.
func (w *sketch) compare(got any, path string, s curlStep, ps *readmeProblems) {
	line := s.bodyLine + lineOf(s.body, w.off)
	name := path
	if name == "" {
		name = "the answer"
	}
	bad := func(format string, a ...any) {
		ps.add(line, "%s: %s; the answer to %s: %s", name, fmt.Sprintf(format, a...), docPos(s.line), compact(got))
	}
	isTime := strings.HasSuffix(path, "_ns")
	switch w.kind {
	case '*':
	case 'S':
		if _, ok := got.(string); !ok {
			bad("shows a string")
		}
	case 's':
		if g, ok := got.(string); !ok || g != w.text {
			bad("shows %q", w.text)
		}
	case 'n':
		g, ok := got.(json.Number)
		if !ok {
			bad("shows a number")
			return
		}
		gf, _ := g.Float64()
		wf, _ := strconv.ParseFloat(w.text, 64)
		if !isTime && gf != wf {
			bad("shows %s", w.text)
		}
	case 'b':
		if g, ok := got.(bool); !ok || strconv.FormatBool(g) != w.text {
			bad("shows %s", w.text)
		}
	case 'z':
		if got != nil {
			bad("shows null")
		}
	case 'o':
		g, ok := got.(map[string]any)
		if !ok {
			bad("shows an object")
			return
		}
		for _, k := range w.keys {
			v, ok := g[k]
			if !ok {
				ps.add(s.bodyLine+lineOf(s.body, w.fields[k].off), "shows key %q; the answer to %s has none: %s", join(path, k), docPos(s.line), compact(got))
				continue
			}
			w.fields[k].compare(v, join(path, k), s, ps)
		}
		if !w.open {
			var extra []string
			for k := range g {
				if w.fields[k] == nil {
					extra = append(extra, k)
				}
			}
			if len(extra) > 0 {
				slices.Sort(extra)
				bad("has keys %s that the README does not show: show them, or end the object with ,... to leave keys out", strings.Join(extra, ", "))
			}
		}
	case 'a':
		g, ok := got.([]any)
		if !ok {
			bad("shows an array")
			return
		}
		if len(g) < len(w.elems) || !w.open && len(g) != len(w.elems) {
			bad("shows %d elements", len(w.elems))
			return
		}
		for i, e := range w.elems {
			e.compare(g[i], fmt.Sprintf("%s[%d]", path, i), s, ps)
		}
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// startReadmeServe starts limitd serve over a miniredis whose clock stands at
// readmeEpoch.
func startReadmeServe(t *testing.T) (string, *miniredis.Miniredis) {
	t.Helper()
	for _, bin := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			redistest.Missing(t, bin+" not found: install it (apt-get install -y curl) to run the README's HTTP examples")
		}
	}
	mini := miniredis.RunT(t)
	mini.SetTime(readmeEpoch)
	// Timeouts a busy machine does not reach: the examples show answers,
	// not what a Redis too slow for limitd's short defaults gets.
	url := "redis://" + mini.Addr() + "?dial_timeout=10s&read_timeout=10s&write_timeout=10s"
	base, _, _ := startServe(t, map[string]string{"LIMITD_REDIS_URL": url, "LIMITD_LOG_LEVEL": "warn"})
	return base, mini
}

// checkHTTPExamples runs the curl blocks of each page one after the other
// on a serve of the page's own, as a reader would.
func checkHTTPExamples(t *testing.T, blocks []mdBlock, ps *readmeProblems) (ran int) {
	t.Helper()
	var base string
	var mini *miniredis.Miniredis
	var now time.Time
	page := -1
	for _, b := range blocks {
		if !curlBlock(b) {
			continue
		}
		if b.line/docLineBase != page {
			page = b.line / docLineBase
			base, mini = startReadmeServe(t)
			now = readmeEpoch
		}
		pre, steps := parseHTTPBlock(b, ps)
		runCurlSteps(t, base, mini, &now, pre, steps, b.line, ps)
		ran += len(steps)
	}
	return ran
}

// TestREADMEHTTP runs the curl examples of the README and docs/.
func TestREADMEHTTP(t *testing.T) {
	blocks, _ := readREADME(t)
	var ps readmeProblems
	if n := checkHTTPExamples(t, blocks, &ps); n == 0 {
		t.Fatalf("no curl block (an sh block that starts with %s) found", readmeBaseVar)
	}
	ps.report(t)
}
