package lua

import (
	"regexp"
	"strings"
)

// fold writes the value of every constant of src into its uses and drops
// its declaration. A constant is a local of the chunk's top level (or of a
// kind file's block: see libSource), declared alone on its line with a
// literal value, `local NAME = 42` or `local A, B = 1, '<B'`, whose name is
// in capitals, never assigned again and never declared again (as a local, a
// parameter or a loop variable) anywhere in src; a name that breaks either
// rule is left as it is.
//
// A script runs its top level on every call (EVAL), and each local a closure
// captures costs there: Lua finds it by walking the list of every captured
// local declared after it. A literal costs nothing: it sits in the closure's
// constants. So the scripts are written with named constants and run
// without them. Comments and string literals are left as they are.
func fold(src string) string {
	lines := strings.Split(src, "\n")
	code := make([]string, len(lines)) // the lines without comments and strings
	for i, l := range lines {
		code[i] = codeOnly(l)
	}
	declared, assigned := bindings(strings.Join(code, "\n"))
	consts := map[string]string{}
	var names []string
	for i, line := range lines {
		if j := commentStart(line); j >= 0 {
			line = line[:j]
		}
		m := constDecl.FindStringSubmatch(strings.TrimRight(line, " \t"))
		if m == nil {
			continue
		}
		ns, vs := strings.Split(m[1], ", "), splitValues(m[2])
		ok := len(ns) == len(vs)
		for k := 0; ok && k < len(vs); k++ {
			ok = constValue.MatchString(vs[k]) && declared[ns[k]] == 1 && assigned[ns[k]] == 0
		}
		if !ok {
			continue
		}
		for k, n := range ns {
			v := strings.ReplaceAll(vs[k], "' .. '", "")
			if strings.HasPrefix(v, "-") {
				v = "(" + v + ")" // never x --1, a comment
			}
			consts[n] = v
			names = append(names, n)
		}
		lines[i] = "-- " + lines[i] // a comment keeps the lines where they were
	}
	if len(consts) == 0 {
		return src
	}
	uses := regexp.MustCompile(`\b(?:` + strings.Join(names, "|") + `)\b`)
	for i, line := range lines {
		if strings.HasPrefix(line, "-- ") || !uses.MatchString(code[i]) {
			continue
		}
		lines[i] = mapCode(line, func(c string) string {
			return uses.ReplaceAllStringFunc(c, func(n string) string { return consts[n] })
		})
	}
	return strings.Join(lines, "\n")
}

var (
	constDecl  = regexp.MustCompile(`^local ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*) = (.*)$`)
	constValue = regexp.MustCompile(`^(?:-?\d+|'[^'\\]*'(?: \.\. '[^'\\]*')*)$`)

	// what binds a name: a local (or local function), a loop variable, a
	// parameter; and the head of an assignment, a statement at a line's
	// start or after `)`, `;`, then, do, else or end
	localDecl = regexp.MustCompile(`\blocal\s+(?:function\s+)?(\w+(?:\s*,\s*\w+)*)`)
	forDecl   = regexp.MustCompile(`\bfor\s+(\w+(?:\s*,\s*\w+)*)`)
	paramDecl = regexp.MustCompile(`\bfunction\s*[\w.:]*\(([^)]*)\)`)
	assign    = regexp.MustCompile(`(?m)(?:^|\b(?:then|do|else|end)\b|[;)])\s*([\w.\[\]]+(?:\s*,\s*[\w.\[\]]+)*)\s*=[^=]`)
	word      = regexp.MustCompile(`\w+`)
)

// bindings counts, in code without comments and strings, the declarations
// and the assignments of each name.
func bindings(code string) (declared, assigned map[string]int) {
	declared, assigned = map[string]int{}, map[string]int{}
	for _, re := range []*regexp.Regexp{localDecl, forDecl, paramDecl} {
		for _, m := range re.FindAllStringSubmatch(code, -1) {
			for _, n := range word.FindAllString(m[1], -1) {
				declared[n]++
			}
		}
	}
	for _, m := range assign.FindAllStringSubmatch(code, -1) {
		for _, n := range strings.Split(m[1], ",") {
			assigned[strings.TrimSpace(n)]++
		}
	}
	return declared, assigned
}

// splitValues splits a declaration's values at the commas outside quotes.
func splitValues(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// codeOnly is a line without its comment, its string literals emptied.
func codeOnly(line string) string {
	if j := commentStart(line); j >= 0 {
		line = line[:j]
	}
	return scanCode(line, func(c string) string { return c }, true)
}

// mapCode applies f to the parts of a line that are code: neither a string
// literal nor the comment that ends the line.
func mapCode(line string, f func(string) string) string { return scanCode(line, f, false) }

// scanCode is mapCode; with drop, string literals come out as ” and the
// comment is dropped.
func scanCode(line string, f func(string) string, drop bool) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			b.WriteString(f(line[start:i]))
			if !drop {
				b.WriteString(line[i:])
			}
			return b.String()
		case c == '\'' || c == '"':
			b.WriteString(f(line[start:i]))
			j := i + 1
			for j < len(line) && line[j] != c {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(line))
			if drop {
				b.WriteString("''")
			} else {
				b.WriteString(line[i:j])
			}
			start, i = j, j-1
		}
	}
	b.WriteString(f(line[start:]))
	return b.String()
}

// commentStart is where the comment that ends a line starts, or -1.
func commentStart(line string) int {
	quote := byte(0)
	for k := 0; k < len(line); k++ {
		c := line[k]
		switch {
		case quote != 0:
			if c == '\\' {
				k++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && k+1 < len(line) && line[k+1] == '-':
			return k
		}
	}
	return -1
}
