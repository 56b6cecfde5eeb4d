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
	consts := map[string]string{}
	var order []string
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if j := commentStart(line); j >= 0 {
			line = line[:j]
		}
		m := constDecl.FindStringSubmatch(strings.TrimRight(line, " \t"))
		if m == nil {
			continue
		}
		names, values := strings.Split(m[1], ", "), splitValues(m[2])
		if len(names) != len(values) {
			continue
		}
		ok := true
		for _, v := range values {
			ok = ok && constValue.MatchString(v)
		}
		for _, n := range names {
			ok = ok && consts[n] == "" && !redeclared(src, n)
		}
		if !ok {
			continue
		}
		for j, n := range names {
			v := values[j]
			if strings.Contains(v, "' .. '") {
				v = strings.ReplaceAll(v, "' .. '", "")
			}
			if strings.HasPrefix(v, "-") {
				v = "(" + v + ")" // never x --1, a comment
			}
			consts[n] = v
			order = append(order, n)
		}
		lines[i] = "-- " + lines[i] // a comment keeps the lines where they were
	}
	if len(consts) == 0 {
		return src
	}
	names := regexp.MustCompile(`\b(?:` + strings.Join(order, "|") + `)\b`)
	for i, line := range lines {
		lines[i] = mapCode(line, func(code string) string {
			return names.ReplaceAllStringFunc(code, func(n string) string { return consts[n] })
		})
	}
	return strings.Join(lines, "\n")
}

var (
	constDecl  = regexp.MustCompile(`^local ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*) = (.*)$`)
	constValue = regexp.MustCompile(`^(?:-?\d+|'[^'\\]*'(?: \.\. '[^'\\]*')*)$`)
)

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

// redeclared reports whether name is assigned after its declaration (a
// statement at a line's start or after `)`, `;`, then, do, else or end) or
// declared a second time in src.
func redeclared(src, name string) bool {
	n := regexp.QuoteMeta(name)
	decl := regexp.MustCompile(`(?m)^\s*local\s+(?:\w+\s*,\s*)*` + n + `\b|\bfor\s+(?:\w+\s*,\s*)*` + n +
		`\b|\bfunction\s*[\w.:]*\([^)]*\b` + n + `\b[^)]*\)|(?m)(?:^|\b(?:then|do|else|end)\b|[;)])\s*(?:[\w.\[\]]+\s*,\s*)*` + n + `\s*(?:,\s*[\w.\[\]]+\s*)*=[^=]`)
	return len(decl.FindAllStringIndex(stripComments(src), 2)) > 1
}

func stripComments(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if j := commentStart(l); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// mapCode applies f to the parts of a line that are code: neither a string
// literal nor the comment that ends the line.
func mapCode(line string, f func(string) string) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			b.WriteString(f(line[start:i]))
			b.WriteString(line[i:])
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
			b.WriteString(line[i:j])
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
