package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// readBody returns the request body (nil when there is none). A Content-Type,
// if given, must be JSON (a route that needs no token requires one, untokened).
func readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	lb, _ := r.Body.(*limitedBody) // nil: the request came without a body
	if lb != nil {
		lb.read = true
	}
	b, err := readAll(r)
	if err != nil {
		var (
			mbe *http.MaxBytesError
			ne  net.Error
		)
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge(mbe.Limit)
		case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			closeAfter(c) // the rest of the body may still come: not as a request
			return nil, newProblem(http.StatusRequestTimeout, wire.ProblemBodyTimeout,
				fmt.Sprintf("the request body did not arrive within %s", lb.timeoutOrZero()))
		case r.Context().Err() != nil:
			return nil, err // the client left or time ran out: problemOf says which
		}
		return nil, invalid("", "could not read the request body: "+err.Error())
	}
	if lb != nil && lb.ctl != nil {
		_ = lb.ctl.SetReadDeadline(time.Time{}) // see limits
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !jsonMediaType(ct) {
		return nil, notJSON(ct)
	}
	return b, nil
}

// readAll reads a body whole: into a buffer of its declared length when it
// has one (the common small body in one allocation), else as io.ReadAll.
func readAll(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	// One byte more, to see the end.
	b := make([]byte, 0, r.ContentLength+1)
	for {
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
	}
}

// decodeBody reads the request's body (readBody) and decodes it into v (decodeStrict).
func decodeBody(c echo.Context, v any) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeStrict(b, v, "")
}

// required is the problem of a required field left out.
func required(field, why string) error {
	return invalid(field, field+": is required: "+why)
}

// decodeStrict decodes one JSON value from b into v: unknown fields (walkKeys)
// and anything after the value are errors. prefix is v's path in the request.
func decodeStrict(b []byte, v any, prefix string) error {
	if len(b) == 0 {
		return invalid(prefix, join(prefix, "a JSON object is required"))
	}
	// encoding/json matches keys case-insensitively and lets the last of
	// duplicate keys win: both would accept what the client did not mean.
	kd := json.NewDecoder(bytes.NewReader(b))
	kd.UseNumber()
	if p, _ := walkKeys(kd, reflect.TypeOf(v), prefix); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err, prefix)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(prefix, join(prefix, "unexpected data after the JSON object"))
	}
	return nil
}

// jsonProblem names the field of a decoding error where one is at fault.
func jsonProblem(err error, prefix string) *problem {
	var (
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &se):
		return invalid("", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return invalid("", "malformed JSON: the body ends before the JSON value does")
	case errors.As(err, &te):
		field := join(prefix, te.Field)
		if te.Field == "" {
			return invalid(prefix, join(prefix, "must be a JSON object (got "+te.Value+")"))
		}
		return invalid(field, fmt.Sprintf("%s: must be %s (got %s)", field, jsonKind(te.Type), clip(te.Value)))
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	}
	return invalid("", "malformed JSON: "+err.Error())
}

// walkKeys walks the next JSON value of dec beside the Go type t it is
// decoded into, and refuses a key that appears twice in one object, or that
// names no field of a struct (in any letter case but the field's own). err is
// a syntax error, which ends the walk without a problem (the decoder names it).
func walkKeys(dec *json.Decoder, t reflect.Type, path string) (*problem, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	t = opaque(t)
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := kt.(string)
			field := join(path, key)
			if seen[key] {
				return invalid(clip(field), fmt.Sprintf("%s: appears twice in one object; send each key once", clip(field))), nil
			}
			seen[key] = true
			var next reflect.Type
			switch {
			case fields != nil:
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return invalid(clip(field), fmt.Sprintf("%s: unknown field; keys are case-sensitive: did you mean %q?", clip(field), join(path, name))), nil
						}
					}
					return invalid(clip(field), fmt.Sprintf("%s: unknown field (see /openapi.yaml)", clip(field))), nil
				}
				next = ft
			case t != nil && t.Kind() == reflect.Map:
				next = t.Elem()
			}
			if p, err := walkKeys(dec, next, field); p != nil || err != nil {
				return p, err
			}
		}
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if p, err := walkKeys(dec, elem, path); p != nil || err != nil {
				return p, err
			}
		}
	default:
		return nil, nil // a scalar
	}
	_, err = dec.Token() // the closing delimiter
	return nil, err
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// opaque returns t without pointers, or nil when its keys are not known from
// its fields (a json.Unmarshaler, an interface); duplicates are still checked.
func opaque(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) {
			return nil
		}
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	return t
}

// fieldCache holds jsonFields by type: the request types are few and fixed.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields are a struct's JSON keys and their types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m, ok := fieldCache.Load(t)
	if !ok {
		m, _ = fieldCache.LoadOrStore(t, structFields(t))
	}
	return m.(map[string]reflect.Type)
}

func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.HasPrefix(tag, "-,") {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		out[cmp.Or(name, f.Name)] = f.Type
	}
	return out
}

func join(prefix, s string) string {
	if prefix == "" {
		return s
	}
	if s == "" {
		return prefix
	}
	return prefix + "." + s
}

var (
	durationType = reflect.TypeFor[limiter.Duration]()
	burstType    = reflect.TypeFor[limiter.Burst]()
)

// jsonKind says in JSON terms what a Go type expects.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t {
	case durationType:
		return `a Go duration string such as "250ms"`
	case burstType:
		return `a number ≥ 1 or "inf"`
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a finite number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another type"
}

// mergePatch applies an RFC 7386 JSON merge patch to a canonical config,
// one level deep (config fields are scalars). A field that excludes others
// removes them from the current config first, so that {"spec":"200,1.5"} or
// {"warmup":"4s"} alone is a valid patch.
func mergePatch(cur limiter.Config, patch map[string]json.RawMessage) (limiter.Config, error) {
	b, err := json.Marshal(cur)
	if err != nil {
		return limiter.Config{}, fmt.Errorf("api: encoding config: %w", err)
	}
	doc := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &doc); err != nil {
		return limiter.Config{}, fmt.Errorf("api: encoding config: %w", err)
	}
	excludes := map[string][]string{
		"spec":              {"rate", "burst"},
		"warmup":            {"max_burst_seconds"},
		"max_burst_seconds": {"warmup", "cold_factor"},
	}
	for k, v := range patch {
		if !isNull(v) {
			for _, x := range excludes[k] {
				delete(doc, x)
			}
		}
	}
	for k, v := range patch {
		if isNull(v) {
			delete(doc, k)
		} else {
			doc[k] = v
		}
	}
	merged, err := json.Marshal(doc)
	if err != nil {
		return limiter.Config{}, fmt.Errorf("api: encoding config: %w", err)
	}
	var next limiter.Config
	if err := decodeStrict(merged, &next, ""); err != nil {
		return limiter.Config{}, err
	}
	return next, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }
