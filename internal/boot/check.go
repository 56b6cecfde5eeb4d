package boot

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/limiter"
)

type fault struct {
	line int
	msg  string
}

// check walks the node tree of a file against t, the type it decodes into,
// and returns the first field at fault with the line of its node (an
// unknown or repeated key, a value of the wrong shape or type, or one its
// own UnmarshalYAML refuses), named by its dotted path. A tree it passes
// decodes without error.
func check(root *yaml.Node, t reflect.Type) *fault {
	if root.Kind == 0 { // an empty file
		return nil
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	return walk(root, t, "")
}

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func walk(n *yaml.Node, t reflect.Type, path string) *fault {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	kind := base.Kind()
	if reflect.PointerTo(base).Implements(unmarshaler) ||
		kind != reflect.Struct && kind != reflect.Map && kind != reflect.Slice {
		return leaf(n, t, path)
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return nil
	case kind != reflect.Slice && n.Kind == yaml.MappingNode:
		return walkMapping(n, base, path, map[string]int{})
	case kind != reflect.Slice || n.Kind != yaml.SequenceNode:
		return wrongType(n, t, path)
	}
	for i, item := range n.Content {
		if f := walk(item, base.Elem(), fmt.Sprintf("%s[%d]", path, i)); f != nil {
			return f
		}
	}
	return nil
}

// walkMapping checks mapping n against a struct or map type; seen holds
// the keys met so far with their lines, merged mappings (<<) included.
func walkMapping(n *yaml.Node, t reflect.Type, path string, seen map[string]int) *fault {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			if f := walkMerge(v, t, path, seen); f != nil {
				return f
			}
			continue
		}
		if line, dup := seen[k.Value]; dup && line > 0 {
			return &fault{k.Line, fmt.Sprintf("mapping key %q already defined at line %d", k.Value, line)}
		}
		seen[k.Value] = k.Line
		var ft reflect.Type
		if t.Kind() == reflect.Map {
			ft = t.Elem()
		} else if ft = fieldType(t, k.Value); ft == nil {
			return &fault{k.Line, fmt.Sprintf("unknown field %q%s", k.Value, in(path))}
		}
		if f := walk(v, ft, dotted(path, k.Value)); f != nil {
			return f
		}
	}
	return nil
}

// walkMerge checks the mappings a merge key brings in (one, or a list).
// Their keys may repeat the mapping's own, which win, as YAML merges them.
func walkMerge(v *yaml.Node, t reflect.Type, path string, seen map[string]int) *fault {
	for v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		inner := map[string]int{}
		for k := range seen {
			inner[k] = 0 // known, not a duplicate
		}
		return walkMapping(v, t, path, inner)
	case yaml.SequenceNode:
		for _, m := range v.Content {
			if f := walkMerge(m, t, path, seen); f != nil {
				return f
			}
		}
		return nil
	}
	return &fault{v.Line, "a merge key (<<) takes a mapping or a list of mappings" + in(path)}
}

// leaf decodes a value on its own, as the whole decode would.
func leaf(n *yaml.Node, t reflect.Type, path string) *fault {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	var fe *limiter.FieldError
	if errors.As(err, &fe) {
		return &fault{n.Line, fmt.Sprintf("%s: %s", path, ruleOf(fe))}
	}
	return wrongType(n, t, path)
}

func wrongType(n *yaml.Node, t reflect.Type, path string) *fault {
	what := n.ShortTag()
	if n.Kind == yaml.ScalarNode {
		what += " `" + n.Value + "`"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return &fault{n.Line, fmt.Sprintf("cannot unmarshal %s into %s%s", what, t, in(path))}
}

func in(path string) string {
	if path == "" {
		return ""
	}
	return " (in " + path + ")"
}

func fieldType(t reflect.Type, key string) reflect.Type {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f.Type
		}
	}
	return nil
}

// entryNodes are the key and value nodes of one limiter or template.
type entryNodes struct{ key, value *yaml.Node }

// lineOf is the line of a dotted field inside the entry, or of the entry
// when the field is not written or is ""; 0 for an entry from a merge key.
func (e entryNodes) lineOf(field string) int {
	if e.key == nil {
		return 0
	}
	return lineIn(e.value, e.key.Line, field)
}

// entries maps the names under a top-level section to their nodes.
func entries(root *yaml.Node, section string) map[string]entryNodes {
	m := map[string]entryNodes{}
	if len(root.Content) == 0 {
		return m
	}
	_, sec := lookup(root.Content[0], section)
	if sec == nil || sec.Kind != yaml.MappingNode {
		return m
	}
	for i := 0; i+1 < len(sec.Content); i += 2 {
		m[sec.Content[i].Value] = entryNodes{sec.Content[i], sec.Content[i+1]}
	}
	return m
}

// lineOfPath is the line of a field path ("domains[0].descriptors[2].key"),
// or of the deepest part of it written in the file (0: none).
func lineOfPath(root *yaml.Node, path string) int {
	if len(root.Content) == 0 {
		return 0
	}
	return lineIn(root.Content[0], 0, path)
}

// lineIn is the line of the deepest part of path written under n, line
// when none is.
func lineIn(n *yaml.Node, line int, path string) int {
	for part := range strings.SplitSeq(path, ".") {
		name, index, indexed := strings.Cut(part, "[")
		k, v := lookup(n, name)
		if part == "" || k == nil {
			break
		}
		line, n = k.Line, v
		if indexed {
			var i int
			if _, err := fmt.Sscanf(index, "%d]", &i); err != nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				break
			}
			n = n.Content[i]
			line = n.Line
		}
	}
	return line
}

func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}
