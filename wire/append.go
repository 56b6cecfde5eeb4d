package wire

import (
	"reflect"
	"strconv"
	"strings"
)

// The answers of an acquire are written on every call, so they have
// encoders of their own: AppendJSON writes exactly what encoding/json
// writes (wire's tests check it field by field), without reflection. The
// keys come from the structs' tags, read once.

var (
	grantedKeys = keyPieces[Granted]()
	deniedKeys  = keyPieces[Denied]()
)

// AppendJSON appends g's JSON, as json.Marshal writes it, to b.
func (g Granted) AppendJSON(b []byte) []byte {
	b = strconv.AppendBool(append(b, grantedKeys[0]...), g.Granted)
	return appendInts(b, grantedKeys[1:], g.Permits, g.Delay, g.Scheduled, g.Start, g.Lateness, g.Wait, g.Version, g.Now)
}

// AppendJSON appends d's JSON, as json.Marshal writes it, to b.
func (d Denied) AppendJSON(b []byte) []byte {
	b = strconv.AppendBool(append(b, deniedKeys[0]...), d.Granted)
	return appendInts(b, deniedKeys[1:], d.RetryAfter, d.Delay, d.Wait, d.Version, d.Now)
}

// windowKeys continue an object: the first starts with ',', not '{'.
var windowKeys = func() []string {
	k := keyPieces[Window]()
	k[0] = "," + k[0][1:]
	return k
}()

// extend writes w's fields into the JSON object b ends with (its '}').
func (w Window) extend(b []byte) []byte {
	return appendInts(b[:len(b)-1], windowKeys, w.Limit, w.Remaining, w.Reset, w.ResetAt)
}

// appendInts appends each of vs after its key, and the object's '}'.
func appendInts(b []byte, keys []string, vs ...int64) []byte {
	for i, v := range vs {
		b = strconv.AppendInt(append(b, keys[i]...), v, 10)
	}
	return append(b, '}')
}

// keyPieces returns, for each field of the struct T in order, its key as
// encoding/json writes it with what precedes it: `{"a":`, `,"b":`, …. It
// panics on a tag this encoding does not follow (omitempty, "-", a missing
// name, a key that needs escaping): the encoders above write every field.
func keyPieces[T any]() []string {
	t := reflect.TypeFor[T]()
	out := make([]string, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || opts != "" || strconv.Quote(name) != `"`+name+`"` {
			panic("wire: " + t.Name() + "." + f.Name + ": a tag AppendJSON does not follow")
		}
		sep := ","
		if i == 0 {
			sep = "{"
		}
		out[i] = sep + `"` + name + `":`
	}
	return out
}
