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
	k := grantedKeys
	b = strconv.AppendBool(append(b, k[0]...), g.Granted)
	b = strconv.AppendInt(append(b, k[1]...), g.Permits, 10)
	b = strconv.AppendInt(append(b, k[2]...), g.Delay, 10)
	b = strconv.AppendInt(append(b, k[3]...), g.Scheduled, 10)
	b = strconv.AppendInt(append(b, k[4]...), g.Start, 10)
	b = strconv.AppendInt(append(b, k[5]...), g.Lateness, 10)
	b = strconv.AppendInt(append(b, k[6]...), g.Wait, 10)
	b = strconv.AppendInt(append(b, k[7]...), g.Version, 10)
	b = strconv.AppendInt(append(b, k[8]...), g.Now, 10)
	return append(b, '}')
}

// AppendJSON appends d's JSON, as json.Marshal writes it, to b.
func (d Denied) AppendJSON(b []byte) []byte {
	k := deniedKeys
	b = strconv.AppendBool(append(b, k[0]...), d.Granted)
	b = strconv.AppendInt(append(b, k[1]...), d.RetryAfter, 10)
	b = strconv.AppendInt(append(b, k[2]...), d.Delay, 10)
	b = strconv.AppendInt(append(b, k[3]...), d.Wait, 10)
	b = strconv.AppendInt(append(b, k[4]...), d.Version, 10)
	b = strconv.AppendInt(append(b, k[5]...), d.Now, 10)
	return append(b, '}')
}

var windowKeys = keyPieces[Window]()

// extend writes w's fields into the JSON object b ends with.
func (w Window) extend(b []byte) []byte {
	k := windowKeys
	b = b[:len(b)-1] // the object's '}'
	b = strconv.AppendInt(append(b, ","+k[0][1:]...), w.Limit, 10)
	b = strconv.AppendInt(append(b, k[1]...), w.Remaining, 10)
	b = strconv.AppendInt(append(b, k[2]...), w.Reset, 10)
	b = strconv.AppendInt(append(b, k[3]...), w.ResetAt, 10)
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
