package boot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/limiter"
)

// File is a parsed and checked boot file.
type File struct {
	Path      string
	Sum       string // sha256 of the content, the mark core.Service.Mark keeps
	Limiters  []Limiter
	Templates []limitd.Template // the file's own, then the rules'
	Rules     *envoyrules.Rules // the domains' descriptor rules
}

// Limiter is one limiter of a boot file.
type Limiter struct {
	Name   string
	Config limiter.Config
}

type schema struct {
	Limiters  map[string]limiter.Config `yaml:"limiters"`
	Templates map[string]template       `yaml:"templates"`
	Domains   []envoyrules.Domain       `yaml:"domains"`
}

type template struct {
	Pattern string            `yaml:"pattern"`
	Order   int               `yaml:"order"`
	IdleTTL *limiter.Duration `yaml:"idle_ttl"`
	Limiter limiter.Config    `yaml:"limiter"`
}

// Load reads and checks the boot file at path. Errors start with the path
// and, when one is at fault, the line.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *PathError names the file
	}
	return Parse(path, data)
}

// Parse checks data, the content of the boot file at path.
func Parse(path string, data []byte) (*File, error) {
	fail := failer(path)
	var doc schema
	root, _, err := decodeYAML(data, &doc, fail, "put everything in one") // an empty file declares nothing
	if err != nil {
		return nil, err
	}

	b := &File{Path: path, Sum: sumOf(data)}
	limiterNodes, templateNodes := entries(root, "limiters"), entries(root, "templates")
	for _, name := range slices.Sorted(maps.Keys(doc.Limiters)) {
		c, n := doc.Limiters[name], limiterNodes[name]
		if err := limitd.CheckNameAs("name", name); err != nil {
			return nil, fail(n.lineOf(""), "limiters: %q is not a valid name: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", name)
		}
		if err := checkLimiter(c); err != nil {
			field, rule := fieldOf(err)
			return nil, fail(n.lineOf(field), "%s: %s", dotted("limiters", name, field), rule)
		}
		b.Limiters = append(b.Limiters, Limiter{Name: name, Config: c})
	}
	for _, id := range slices.Sorted(maps.Keys(doc.Templates)) {
		bt, n := doc.Templates[id], templateNodes[id]
		t := limitd.Template{ID: id, Pattern: bt.Pattern, Order: bt.Order, IdleTTL: bt.IdleTTL, Limiter: bt.Limiter}
		norm, err := t.Normalize()
		if err == nil {
			err = checkLimiter(norm.Limiter)
			if fe := (*limiter.FieldError)(nil); errors.As(err, &fe) {
				err = &limiter.FieldError{Field: "limiter." + fe.Field, Rule: fe.Rule, Value: fe.Value}
			}
		}
		if err != nil {
			field, rule := fieldOf(err)
			if field == "id" {
				return nil, fail(n.lineOf(""), "templates: %q is not a valid id: %s", id, rule)
			}
			return nil, fail(n.lineOf(field), "%s: %s", dotted("templates", id, field), rule)
		}
		b.Templates = append(b.Templates, t)
	}
	rules, err := envoyrules.Compile(doc.Domains)
	if err != nil {
		field, rule := fieldOf(err)
		return nil, fail(lineOfPath(root, field), "%s: %s", field, rule)
	}
	for _, t := range rules.Templates() {
		if _, dup := doc.Templates[t.ID]; dup {
			return nil, fail(templateNodes[t.ID].lineOf(""), "templates: %q is the id of a domains rule's template (ids starting %q are taken by domains:)", t.ID, envoyrules.TemplatePrefix)
		}
		b.Templates = append(b.Templates, t)
	}
	b.Rules = rules
	return b, nil
}

// failer words the errors of the file named name, with the line at fault
// when it is known (> 0).
func failer(name string) func(line int, format string, a ...any) error {
	return func(line int, format string, a ...any) error {
		msg := fmt.Sprintf(format, a...)
		if line > 0 {
			return fmt.Errorf("%s: line %d: %s", name, line, msg)
		}
		return fmt.Errorf("%s: %s", name, msg)
	}
}

// decodeYAML decodes the one YAML document of data strictly into v, its
// node tree checked first (check.go) and returned for the lines of later
// errors. empty: data holds no document. more ends the error of a second
// document.
func decodeYAML(data []byte, v any, fail func(int, string, ...any) error, more string) (root *yaml.Node, empty bool, err error) {
	root = new(yaml.Node)
	if err := yaml.Unmarshal(data, root); err != nil {
		return nil, false, fail(0, "%s", strings.TrimPrefix(err.Error(), "yaml: ")) // yaml words it with its line
	}
	if f := check(root, reflect.TypeOf(v).Elem()); f != nil {
		return nil, false, fail(f.line, "%s", f.msg)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	switch err := dec.Decode(v); {
	case errors.Is(err, io.EOF):
		return root, true, nil
	case err != nil:
		return nil, false, fail(0, "%v", err) // what check missed, as yaml words it
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, false, fail(0, "holds more than one YAML document; %s", more)
	}
	return root, false, nil
}

// checkLimiter accepts exactly the configs core.Service.Put accepts, minus
// the restart verb, which would reset the schedules at every boot.
func checkLimiter(c limiter.Config) error {
	norm, verb, err := c.Normalize()
	if err != nil {
		return err
	}
	if verb == limiter.VerbRestart {
		return &limiter.FieldError{Field: "spec", Rule: "must not use the restart verb in a boot file: it would reset the schedule at every boot", Value: fmt.Sprintf("%q", c.Spec)}
	}
	_, err = limiter.Compile(norm)
	return err
}

func dotted(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), ".")
}

func fieldOf(err error) (field, rule string) {
	var fe *limiter.FieldError
	if errors.As(err, &fe) {
		return fe.Field, ruleOf(fe)
	}
	return "", err.Error()
}

func ruleOf(fe *limiter.FieldError) string {
	if fe.Value == nil {
		return fe.Rule
	}
	return fmt.Sprintf("%s (got %v)", fe.Rule, fe.Value)
}
