package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
)

// readBody returns the request body (nil when there is none). A body must be
// JSON: a Content-Type, if given, must be application/json or another
// +json type.
func readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(mbe.Limit)
		}
		if r.Context().Err() != nil {
			return nil, err // the client left or time ran out: problemOf says which
		}
		return nil, invalid("", "could not read the request body: "+err.Error())
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			return nil, newProblem(http.StatusUnsupportedMediaType, "unsupported-media-type",
				fmt.Sprintf("Content-Type %q is not JSON; send Content-Type: application/json", ct))
		}
	}
	return b, nil
}

// decodeStrict decodes one JSON value from b into v: unknown fields are
// errors, as is anything after the value. prefix is the path of v inside the
// request ("limiter" for a template's config), for the problem's field.
func decodeStrict(b []byte, v any, prefix string) error {
	if len(b) == 0 {
		return invalid(prefix, join(prefix, "a JSON object is required"))
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
	const unknown = "json: unknown field "
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
		return invalid(field, fmt.Sprintf("%s: must be %s (got %s)", field, jsonKind(te.Type), te.Value))
	case strings.HasPrefix(err.Error(), unknown):
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), unknown))
		if uerr != nil {
			name = strings.TrimPrefix(err.Error(), unknown)
		}
		field := join(prefix, name)
		return invalid(field, fmt.Sprintf("%s: unknown field (see /openapi.yaml)", field))
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	}
	return invalid("", "malformed JSON: "+err.Error())
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

// specFault names "spec" when a config given as a rate spec string is at
// fault: limiter reports the spec's parts as rate, burst and spec.verb, but
// the client sent only "spec". prefix is the config's path in the request.
func specFault(err error, spec, prefix string) error {
	var fe *limiter.FieldError
	if spec == "" || !errors.As(err, &fe) {
		return err
	}
	f := fe.Field
	if prefix != "" {
		f = strings.TrimPrefix(f, prefix+".")
	}
	switch {
	case f == "rate", f == "burst", strings.HasPrefix(f, "spec."):
		return invalid(join(prefix, "spec"), join(prefix, "spec")+": "+fe.Error())
	}
	return err
}

// mergePatch applies an RFC 7386 JSON merge patch to a canonical config:
// null removes a field, any other value replaces it. Config fields are
// scalars, so the merge is one level deep; an object given for one fails to
// decode, as it would after a deep merge. A field that excludes others (spec
// excludes rate and burst; warmup excludes max_burst_seconds and the other
// way round) removes them from the current config first, so that
// {"spec":"200,1.5"} or {"warmup":"4s"} alone is a valid patch.
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
