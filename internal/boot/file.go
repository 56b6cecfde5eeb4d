package boot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
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

// ruleOf is fe's text without its field: the rule and the value refused.
func ruleOf(fe *limiter.FieldError) string {
	return strings.TrimPrefix(fe.Error(), fe.Field+": ")
}

// Apply writes every limiter and template of the file through svc, then
// its mark (core.Service.Mark). The file was checked whole when loaded, so
// only Redis can fail here.
func (b *File) Apply(ctx context.Context, svc *core.Service) error {
	return b.applySome(ctx, svc, nil, nil)
}

// applySome writes the named limiters and templates of the file (all of
// them when both lists are nil), then the mark.
func (b *File) applySome(ctx context.Context, svc *core.Service, limiters, templates []string) error {
	all := limiters == nil && templates == nil
	for _, l := range b.Limiters {
		if !all && !slices.Contains(limiters, l.Name) {
			continue
		}
		if _, _, err := svc.Put(ctx, l.Name, l.Config); err != nil {
			return fmt.Errorf("limiter %q: %w", l.Name, err)
		}
	}
	for _, t := range b.Templates {
		if !all && !slices.Contains(templates, t.ID) {
			continue
		}
		if _, _, err := svc.PutTemplate(ctx, t); err != nil {
			return fmt.Errorf("template %q: %w", t.ID, err)
		}
	}
	if err := svc.Mark(ctx, b.Sum); err != nil {
		return fmt.Errorf("boot mark: %w", err)
	}
	return nil
}

func (b *File) names() (limiters, templates []string) {
	for _, l := range b.Limiters {
		limiters = append(limiters, l.Name)
	}
	for _, t := range b.Templates {
		templates = append(templates, t.ID)
	}
	return limiters, templates
}

// A Source is where a Keeper reads its configuration again.
type Source interface {
	Where() string // a path, for logs
	// Read reads it once: the sum of what it read, which tells a change,
	// and the parse of that same content.
	Read() (sum string, parse func() (*File, error), err error)
}

// FileSource is the boot file at a path.
type FileSource string

// Where is the path.
func (p FileSource) Where() string { return string(p) }

// Read reads the file.
func (p FileSource) Read() (string, func() (*File, error), error) {
	data, err := os.ReadFile(string(p))
	if err != nil {
		return "", nil, err
	}
	return sumOf(data), func() (*File, error) { return Parse(string(p), data) }, nil
}

func sumOf(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// DirSource is a runtime directory as the reference rate limit server reads
// it: every *.yaml (or *.yml) file in it is one domain's config
// (envoyrules.Domain), all of them applied together or not at all.
// Subdirectories are not read (a ConfigMap volume keeps old versions in
// one), symlinks to files are followed, and dot files are skipped with
// IgnoreDotFiles.
type DirSource struct {
	Dir            string
	IgnoreDotFiles bool
}

// Where is the directory.
func (d DirSource) Where() string { return d.Dir }

type dirFile struct {
	name string // relative to the directory
	data []byte
}

// Read reads every config file of the directory.
func (d DirSource) Read() (string, func() (*File, error), error) {
	ents, err := os.ReadDir(d.Dir)
	if err != nil {
		return "", nil, err
	}
	var files []dirFile
	h := sha256.New()
	for _, e := range ents { // sorted by name
		name := e.Name()
		ext := filepath.Ext(name)
		if ext != ".yaml" && ext != ".yml" || d.IgnoreDotFiles && strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(d.Dir, name)
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue // a directory, or a symlink left dangling by an update in progress
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", nil, err
		}
		files = append(files, dirFile{name, data})
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(data))
		h.Write(data)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return sum, func() (*File, error) { return parseDir(d.Dir, sum, files) }, nil
}

// LoadDir reads and checks a runtime directory once.
func LoadDir(d DirSource) (*File, error) {
	_, parse, err := d.Read()
	if err != nil {
		return nil, err
	}
	return parse()
}

// parseDir compiles a runtime directory's files as one set of rules.
// Errors name the file, the line and the field.
func parseDir(dir, sum string, files []dirFile) (*File, error) {
	domains := make([]envoyrules.Domain, len(files))
	roots := make([]*yaml.Node, len(files))
	for i, f := range files {
		fail := failer(f.name)
		root, empty, err := decodeYAML(f.data, &domains[i], fail, "a config file declares one domain")
		if err != nil {
			return nil, err
		}
		if empty {
			return nil, fail(0, "is empty: a config file declares one domain")
		}
		for j := range i {
			if domains[j].Domain == domains[i].Domain && domains[i].Domain != "" {
				return nil, fail(lineOfPath(root, "domain"), "domain: %q is declared by %s too; a domain's rules are in one file", domains[i].Domain, files[j].name)
			}
		}
		roots[i] = root
	}
	f, err := FromDomains(dir, sum, domains)
	var de *DomainError
	if errors.As(err, &de) {
		return nil, failer(files[de.Index].name)(lineOfPath(roots[de.Index], de.Field), "%s: %s", de.Field, de.Rule)
	}
	return f, err
}

// DomainError is a rule of domains[Index] that does not compile: Field is
// its path inside that domain ("descriptors[0].rate_limit.unit").
type DomainError struct {
	Index       int
	Field, Rule string
}

func (e *DomainError) Error() string {
	return fmt.Sprintf("domains[%d].%s: %s", e.Index, e.Field, e.Rule)
}

// FromDomains is the configuration of domains alone (a runtime directory,
// an xDS update): where names its source in logs, sum tells a change. A rule
// that does not compile is a *DomainError.
func FromDomains(where, sum string, domains []envoyrules.Domain) (*File, error) {
	rules, err := envoyrules.Compile(domains)
	if err != nil {
		field, rule := fieldOf(err)
		var i int
		if _, serr := fmt.Sscanf(field, "domains[%d]", &i); serr == nil {
			_, rest, _ := strings.Cut(field, ".")
			return nil, &DomainError{Index: i, Field: rest, Rule: rule}
		}
		return nil, err
	}
	return &File{Path: where, Sum: sum, Templates: slices.Clone(rules.Templates()), Rules: rules}, nil
}
