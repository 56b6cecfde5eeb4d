package lua

import (
	"cmp"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Field is one field of a rate limiter's packed state x: its name in Lua
// and its struct format ('B', 'I4', 'i4', 'i7', 'd').
type Field struct {
	Name, Format string
}

// Kind is a rate kind as its file lua/<name>.lua registers it in KINDS.
type Kind struct {
	Name string
	Code int
	// Params are the kind's parameters in x, after the slice.
	Params []Field
	// Layout is the kind's whole x: lib.lua's HEAD, SLICE, the kind's
	// Params, STATE, RUN, REST.
	Layout []Field
	file   string
	// fast: its row has a fast path, which a script's hot part needs (see
	// scriptText), unless the file keeps it to the library (libOnly).
	fast, libOnly bool
}

// Size is x's size in bytes (binary form).
func (k Kind) Size() int {
	n := 0
	for _, f := range k.Layout {
		n += formatWidth[f.Format]
	}
	return n
}

// ParamNames are the parameters the scripts take for the kind, in order
// (X_OF's params in lib.lua): kind, the slice and max_permits, Params,
// version.
func (k Kind) ParamNames() []string {
	names := []string{"kind"}
	for _, f := range fieldGroups()["SLICE"] {
		names = append(names, f.Name)
	}
	for _, f := range k.Params {
		names = append(names, f.Name)
	}
	return append(names, "version")
}

var formatWidth = map[string]int{"B": 1, "I4": 4, "i4": 4, "i7": 7, "d": 8}

// Kinds returns the rate kinds of the scripts, by code: every embedded file
// that registers a row in KINDS (see Kinds in lib.lua).
func Kinds() []Kind {
	ks := slices.Clone(kinds())
	for i := range ks { // the caller's to change: kinds() stays as derived
		ks[i].Params, ks[i].Layout = slices.Clone(ks[i].Params), slices.Clone(ks[i].Layout)
	}
	return ks
}

var (
	kindRow   = regexp.MustCompile(`(?m)^KINDS\.(\w+) = \{\s*code = (\d+),\s*params = '((?:\w+:\w+ ?)+)'`)
	fieldPair = regexp.MustCompile(`\{'(\w+)', '(\w+)'\}`)
	paramPair = regexp.MustCompile(`(\w+):(\w+)`)
	groupDecl = regexp.MustCompile(`(?s)local (HEAD|SLICE|STATE|RUN|REST) = \{(\{'.*?'\})\}\n`)
)

// fieldGroups are lib.lua's field groups by name: HEAD, SLICE, STATE, RUN, REST.
var fieldGroups = sync.OnceValue(func() map[string][]Field {
	lib := mustRead("lib.lua")
	body := lib[strings.Index(lib, "local function field_groups()"):]
	body = body[:strings.Index(body, "\nend\n")]
	g := map[string][]Field{}
	for _, m := range groupDecl.FindAllStringSubmatch(body, -1) {
		g[m[1]] = fieldsBy(fieldPair, m[2])
	}
	if len(g) != 5 {
		panic(fmt.Sprintf("lua: lib.lua: field_groups: %d groups, want 5", len(g)))
	}
	return g
})

func fieldsBy(re *regexp.Regexp, s string) []Field {
	var fs []Field
	for _, p := range re.FindAllStringSubmatch(s, -1) {
		if formatWidth[p[2]] == 0 {
			panic("lua: field " + p[1] + ": unknown format " + p[2])
		}
		fs = append(fs, Field{p[1], p[2]})
	}
	return fs
}

var kinds = sync.OnceValue(func() []Kind {
	names, err := fs.Glob(files, "*.lua")
	if err != nil {
		panic(err)
	}
	g := fieldGroups()
	var ks []Kind
	for _, file := range names {
		src := mustRead(file)
		if !strings.Contains(src, "\nKINDS.") {
			continue
		}
		m := kindRow.FindAllStringSubmatch(src, -1)
		if len(m) != 1 || m[0][1]+".lua" != file {
			panic("lua: " + file + ": a kind file registers one row, KINDS." + strings.TrimSuffix(file, ".lua") +
				" = {code = ..., params = 'name:format ...', ...}")
		}
		code, _ := strconv.Atoi(m[0][2])
		k := Kind{Name: m[0][1], Code: code, Params: fieldsBy(paramPair, m[0][3]), file: file,
			fast: fastField.MatchString(src), libOnly: libOnlyPart.MatchString(src)}
		k.Layout = slices.Concat(g["HEAD"], g["SLICE"], k.Params, g["STATE"], g["RUN"], g["REST"])
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b Kind) int { return cmp.Compare(a.Code, b.Code) })
	for i, k := range ks {
		if k.Code < 1 || k.Code > 9 || (i > 0 && ks[i-1].Code == k.Code) {
			panic(fmt.Sprintf("lua: kind %s: code %d is not a digit of its own", k.Name, k.Code))
		}
	}
	return ks
})

// libSource is what the library starts with: lib.lua, the kind files, and
// what is derived from them (derived).
var libSource = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString(mustRead("lib.lua"))
	writeKinds(&b, func(Kind) bool { return true }, false)
	b.WriteString("\n" + derived() + derivedFast(func(Kind) bool { return true }))
	return b.String()
})

// fastField is a kind row's fast path (see Kinds in lib.lua), in the row
// or set on it later; libOnlyPart is a kind file's part that only the
// function library gets (see scriptText).
var (
	fastField   = regexp.MustCompile(`\n\s*(?:KINDS\.\w+\.)?fast = `)
	libOnlyPart = regexp.MustCompile(`(?s)\n-- \[library only\].*\n-- \[end library only\]\n`)
)

// inScriptHot reports whether k's file belongs to a script's hot part: it
// has a fast path that scripts take.
func (k Kind) inScriptHot() bool { return k.fast && !k.libOnly }

// writeKinds writes the kind files for which keep is true, each a block of
// its own: its locals are its own, and closed when it ends (a closure made
// later walks past every open one).
func writeKinds(b *strings.Builder, keep func(Kind) bool, script bool) {
	for _, k := range kinds() {
		if !keep(k) {
			continue
		}
		src := mustRead(k.file)
		if script {
			src = libOnlyPart.ReplaceAllString(src, "\n")
		}
		b.WriteString("\ndo\n" + src + "\nend\n")
	}
}

const restMark = "\n-- [rest]"

// fastEntries are the operations whose script first tries a function of
// lib.lua's hot part, (keys, argv, us), which answers or returns nil.
var fastEntries = map[string]string{Acquire: "acquire_fast"}

// scriptText is an operation's script (Source): the same code as the
// library's, arranged so that a call a fast path answers runs little of it
// (docs/kinds.md tells how). A kind file's part marked "-- [library only]"
// is left out of a script, with its fast path: its closures would cost every
// call more than the path saves.
func scriptText(op string) string {
	lib := mustRead("lib.lua")
	i := strings.Index(lib, restMark)
	if i < 0 {
		panic("lua: lib.lua has no line " + strings.TrimSpace(restMark))
	}
	var b strings.Builder
	b.WriteString(lib[:i+1])
	writeKinds(&b, Kind.inScriptHot, true)
	b.WriteString("\n" + derivedFast(Kind.inScriptHot) + "\nlocal function rest_of_library(KEYS, ARGV)\n")
	b.WriteString(lib[i+1:])
	writeKinds(&b, func(k Kind) bool { return !k.inScriptHot() }, true)
	b.WriteString("\n" + derived() + "\n" + mustRead(op+".lua") + "\nend\n\ninit()\n")
	if fn := fastEntries[op]; fn != "" {
		b.WriteString("local answer = " + fn + "(KEYS, ARGV, time_us())\nif answer then return answer end\n")
	}
	b.WriteString("return rest_of_library(KEYS, ARGV)\n")
	return b.String()
}

// derived is the Lua that follows the kind files: for each kind its code,
// name, parameters and layout, with a load and a pack written out field by
// field (see Layouts in lib.lua). Its functions take dec and enc as
// arguments rather than close over them: a script runs its top level on
// every call.
func derived() string {
	var b strings.Builder
	b.WriteString("-- Derived from field_groups and the kinds' rows by lua/layout.go (see\n-- Layouts in lib.lua).\n")
	// Every parameter of every kind, so that L has each field whatever its
	// kind (retune reads a template's old kind's parameters).
	var all []string
	for _, k := range kinds() {
		for _, f := range k.Params {
			if !slices.Contains(all, f.Name) {
				all = append(all, f.Name)
			}
		}
	}
	// L's own fields besides x's: see load, params_from and settle.
	own := "x = %s, kind = %s, stable = 0, d_allocated = 0, d_idle = 0, d_permits = 0, d_lateness = 0"
	zero := func(skip []Field) string {
		var s []string
		for _, n := range all {
			if !slices.ContainsFunc(skip, func(f Field) bool { return f.Name == n }) {
				s = append(s, n+" = 0")
			}
		}
		return strings.Join(s, ", ")
	}
	g := fieldGroups()
	state := slices.Concat(g["HEAD"], g["SLICE"], g["STATE"], g["RUN"], g["REST"])
	var blank []string
	for _, f := range state {
		blank = append(blank, f.Name+" = 0")
	}
	fmt.Fprintf(&b, "blank = function(key, inst)\n  return {key = key, inst = inst, %s, %s,\n    %s}\nend\n",
		fmt.Sprintf(own, "nil", "nil"), zero(nil), strings.Join(blank, ", "))
	rest := 0
	for _, f := range g["REST"] {
		rest += formatWidth[f.Format]
	}
	for _, k := range kinds() {
		var names, fmts, lfields, pfields []string
		for _, f := range k.Layout {
			names = append(names, f.Name)
			fmts = append(fmts, f.Format)
			lfields = append(lfields, f.Name+" = "+f.Name)
			pfields = append(pfields, "L."+f.Name)
		}
		format := "<" + strings.Join(fmts, "")
		q := strconv.Quote(k.Name)
		fmt.Fprintf(&b, "X_OF[%d] = {kind = KINDS[%s], name = %s, fmt = '%s', size = %d, at_last = %d,\n"+
			"  names = '%s',\n  params = '%s', plist = false,\n",
			k.Code, q, q, format, k.Size(), k.Size()-rest-formatWidth["i7"], strings.Join(names, " "), strings.Join(k.ParamNames(), " "))
		fmt.Fprintf(&b, "  load = function(key, inst, x, dec)\n    local %s = dec('%s', x)\n"+
			"    return {key = key, inst = inst, %s,\n      %s", strings.Join(names, ", "), format,
			fmt.Sprintf(own, "x", q), strings.Join(lfields, ", "))
		if z := zero(k.Params); z != "" {
			b.WriteString(",\n      " + z)
		}
		b.WriteString("}\n  end,\n")
		fmt.Fprintf(&b, "  pack = function(L, enc)\n    return enc('%s', %s)\n  end}\n", format, strings.Join(pfields, ", "))
	}
	return b.String()
}

// derivedFast is FAST (see lib.lua): a kind's fast path by its x's size,
// where no other kind's x has that size, for the kinds keep keeps.
func derivedFast(keep func(Kind) bool) string {
	var b strings.Builder
	sizes := map[int]int{}
	for _, k := range kinds() {
		sizes[k.Size()]++
	}
	for _, k := range kinds() {
		if sizes[k.Size()] == 1 && k.fast && keep(k) {
			fmt.Fprintf(&b, "FAST[%d] = KINDS[%s].fast\n", k.Size(), strconv.Quote(k.Name))
		}
	}
	return b.String()
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
