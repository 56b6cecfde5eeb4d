package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The boot file (LIMITD_CONFIG) declares limiters and templates:
//
//	limiters:
//	  orders: {rate: 1000, burst: 1.1, max_backlog: 10s}
//	  search: {spec: "200,1.5"}
//	  login: {kind: smooth, rate: 5, max_burst_seconds: 1}
//	templates:
//	  per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
//	domains:
//	  - domain: messaging
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 100}
//
// domains: are the gRPC front end's descriptor rules, in the reference Envoy
// rate limit server's format (grpcapi.Domain); each rule with a limit is a
// template the file applies beside its own.
//
// It is read strictly (an unknown field is an error naming its line) and
// checked whole before anything is written, so a bad file changes nothing.
// At boot the file wins: each entry is Put, which leaves an equal limiter
// untouched and reconfigures a changed one in place, keeping its schedule.
// Then serve keeps it applied: every second it checks that each limiter and
// template of the file is still in Redis (and each limiter in the index), and
// applies again what is missing: after a restart without persistence, of a
// single node or of any one cluster shard.

// bootFile is a parsed and checked boot file.
type bootFile struct {
	path      string
	sum       string // sha256 of the content, the marker's value
	limiters  []bootLimiter
	templates []store.Template // the file's own, then the rules'
	rules     *grpcapi.Rules   // the domains' descriptor rules
}

type bootLimiter struct {
	name   string
	config limiter.Config
}

// bootYAML is the file's schema.
type bootYAML struct {
	Limiters  map[string]limiter.Config `yaml:"limiters"`
	Templates map[string]bootTemplate   `yaml:"templates"`
	Domains   []grpcapi.Domain          `yaml:"domains"`
}

type bootTemplate struct {
	Pattern string            `yaml:"pattern"`
	Order   int               `yaml:"order"`
	IdleTTL *limiter.Duration `yaml:"idle_ttl"`
	Limiter limiter.Config    `yaml:"limiter"`
}

// loadBootFile reads and checks the boot file at path. Errors start with the
// path and, when one is at fault, the line.
func loadBootFile(path string) (*bootFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *PathError names the file
	}
	return parseBootFile(path, data)
}

func parseBootFile(path string, data []byte) (*bootFile, error) {
	fail := func(line int, format string, a ...any) error {
		msg := fmt.Sprintf(format, a...)
		if line > 0 {
			return fmt.Errorf("%s: line %d: %s", path, line, msg)
		}
		return fmt.Errorf("%s: %s", path, msg)
	}

	// The node tree gives syntax errors and, later, the line of each entry.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fail(0, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var doc bootYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF): // an empty file declares nothing
	case err != nil:
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fail(0, "%s", typeErrors(te))
		}
		// A value's own UnmarshalYAML (a duration, a burst) failed; yaml does
		// not say where, so find the field by decoding one field at a time.
		line, field := locate(&root)
		var fe *limiter.FieldError
		if errors.As(err, &fe) {
			return nil, fail(line, "%s: %s", field, ruleOf(fe))
		}
		return nil, fail(line, "%s: %v", field, err)
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, fail(0, "holds more than one YAML document; put everything in one")
	}

	sum := sha256.Sum256(data)
	b := &bootFile{path: path, sum: hex.EncodeToString(sum[:])}
	limiterNodes, templateNodes := entries(&root, "limiters"), entries(&root, "templates")
	for _, name := range sortedKeys(doc.Limiters) {
		c, n := doc.Limiters[name], limiterNodes[name]
		if err := store.CheckName(name); err != nil {
			return nil, fail(n.lineOf(""), "limiters: %q is not a valid name: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", name)
		}
		if err := checkLimiter(c); err != nil {
			field, rule := fieldOf(err)
			return nil, fail(n.lineOf(field), "%s: %s", dotted("limiters", name, field), rule)
		}
		b.limiters = append(b.limiters, bootLimiter{name: name, config: c})
	}
	for _, id := range sortedKeys(doc.Templates) {
		bt, n := doc.Templates[id], templateNodes[id]
		t := store.Template{ID: id, Pattern: bt.Pattern, Order: bt.Order, IdleTTL: bt.IdleTTL, Limiter: bt.Limiter}
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
		b.templates = append(b.templates, t)
	}
	rules, err := grpcapi.Compile(doc.Domains)
	if err != nil {
		field, rule := fieldOf(err)
		return nil, fail(lineOfPath(&root, field), "%s: %s", field, rule)
	}
	for _, t := range rules.Templates() {
		if _, dup := doc.Templates[t.ID]; dup {
			return nil, fail(templateNodes[t.ID].lineOf(""), "templates: %q is the id of a domains rule's template (ids starting %q are taken by domains:)", t.ID, grpcapi.TemplatePrefix)
		}
		b.templates = append(b.templates, t)
	}
	b.rules = rules
	return b, nil
}

// lineOfPath is the line of a field named as grpcapi names it
// ("domains[0].descriptors[2].rate_limit.unit"), or of the deepest part of
// it written in the file (0: none).
func lineOfPath(root *yaml.Node, path string) int {
	if len(root.Content) == 0 {
		return 0
	}
	n, line := root.Content[0], 0
	for part := range strings.SplitSeq(path, ".") {
		name, index, indexed := strings.Cut(part, "[")
		k, v := lookup(n, name)
		if k == nil {
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

// checkLimiter accepts exactly the configs store.Put accepts, minus the
// restart verb: a boot file that reset its schedules at every boot of every
// limitd process would disturb the callers it is meant to pace.
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

// dotted is the path of a field in the file: "limiters.orders.rate".
func dotted(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), ".")
}

// fieldOf splits a config error into the field at fault and its rule.
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

var notFoundRE = regexp.MustCompile(`field (\S+) not found in type \S+`)

// typeErrors words yaml's list of type errors as one line.
func typeErrors(te *yaml.TypeError) string {
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = notFoundRE.ReplaceAllString(m, `unknown field "$1"`)
	}
	return strings.Join(msgs, "; ")
}

// entryNodes are the key and value nodes of one limiter or template.
type entryNodes struct{ key, value *yaml.Node }

// lineOf is the line of a dotted field ("limiter.rate") inside the entry, or
// of the entry itself when the field is not written (a missing rate) or is "".
// It is 0 for an entry not written as such (one from a YAML merge key).
func (e entryNodes) lineOf(field string) int {
	if e.key == nil {
		return 0
	}
	line, n := e.key.Line, e.value
	for part := range strings.SplitSeq(field, ".") {
		if part == "" {
			break
		}
		k, v := lookup(n, part)
		if k == nil {
			break
		}
		line, n = k.Line, v
	}
	return line
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

// lookup returns the key and value nodes of key in a mapping node.
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

// locate finds the first field whose value fails to decode on its own, and
// returns its line and dotted path ("limiters.orders.max_backlog").
func locate(root *yaml.Node) (line int, path string) {
	newConfig := func() any { return new(limiter.Config) }
	newTemplate := func() any { return new(bootTemplate) }
	for _, sec := range []struct {
		name   string
		target func() any
	}{{"limiters", newConfig}, {"templates", newTemplate}} {
		es := entries(root, sec.name)
		for _, name := range sortedKeys(es) {
			v := es[name].value
			if l, p := firstBad(v, sec.name+"."+name, sec.target, newConfig); l > 0 {
				return l, p
			}
		}
	}
	return 0, "(unknown field)"
}

// firstBad decodes each field of mapping m alone into a fresh target; a
// template's limiter is searched one level down.
func firstBad(m *yaml.Node, path string, target, nested func() any) (int, string) {
	if m.Kind != yaml.MappingNode {
		return 0, ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Value == "limiter" && nested != nil {
			if l, p := firstBad(v, path+".limiter", nested, nil); l > 0 {
				return l, p
			}
			continue
		}
		one := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{k, v}}
		if err := one.Decode(target()); err != nil {
			return v.Line, path + "." + k.Value
		}
	}
	return 0, ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// markerKey holds the sum of the boot file last applied to this Redis, for
// an operator to see which file it got. The keeper does not rely on it: on a
// Redis Cluster the marker lives on one shard, and another shard restarted
// empty loses its limiters while the marker stays.
func markerKey(s *store.Store) string { return s.Prefix() + ":boot" }

// apply writes every limiter and template of the file, then the marker. The
// file was checked whole when it was loaded, so only Redis can fail here.
func (b *bootFile) apply(ctx context.Context, s *store.Store) error {
	return b.applySome(ctx, s, nil, nil)
}

// applySome writes the named limiters and templates of the file (all of them
// when both lists are nil), then the marker. Put leaves an equal limiter
// untouched and lists it in the index again.
func (b *bootFile) applySome(ctx context.Context, s *store.Store, limiters, templates []string) error {
	all := limiters == nil && templates == nil
	for _, l := range b.limiters {
		if !all && !slices.Contains(limiters, l.name) {
			continue
		}
		if _, _, err := s.Put(ctx, l.name, l.config); err != nil {
			return fmt.Errorf("limiter %q: %w", l.name, err)
		}
	}
	for _, t := range b.templates {
		if !all && !slices.Contains(templates, t.ID) {
			continue
		}
		if _, err := s.PutTemplate(ctx, t); err != nil {
			return fmt.Errorf("template %q: %w", t.ID, err)
		}
	}
	if err := s.Client().Set(ctx, markerKey(s), b.sum, 0).Err(); err != nil {
		return fmt.Errorf("boot marker: %w", err)
	}
	return nil
}

// names are the file's limiter names and template ids.
func (b *bootFile) names() (limiters, templates []string) {
	for _, l := range b.limiters {
		limiters = append(limiters, l.name)
	}
	for _, t := range b.templates {
		templates = append(templates, t.ID)
	}
	return limiters, templates
}

// bootKeeper re-applies the parts of the boot file Redis lost. Every interval
// it checks each limiter and template of the file (store.Lost: one pipelined
// round trip per node), so a cluster shard restarted empty gets its own
// limiters back, and a limiter the index no longer lists is listed again.
type bootKeeper struct {
	file     *bootFile
	store    *store.Store
	log      *slog.Logger
	interval time.Duration // between checks
	timeout  time.Duration // for one check and apply
	applied  bool          // the file was applied once: what is missing now, Redis lost
	down     bool          // Redis failed the last check: log the outage once

	// reloadEvery is how often the file is read again (0: never), hup a
	// signal to read it at once. A changed file that parses replaces the
	// one applied (reloaded is told); a bad one is logged once and the
	// one applied stays.
	reloadEvery time.Duration
	hup         <-chan os.Signal
	reloaded    func(*bootFile)
	bad         string // what was last logged as bad: a content's sum or a read error
}

// run checks every interval, and reloads the file every reloadEvery and on
// hup, until ctx ends.
func (k *bootKeeper) run(ctx context.Context) {
	t := time.NewTicker(k.interval)
	defer t.Stop()
	var reload <-chan time.Time
	if k.reloadEvery > 0 {
		rt := time.NewTicker(k.reloadEvery)
		defer rt.Stop()
		reload = rt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.check(ctx)
		case <-reload:
			k.reload(ctx)
		case <-k.hup:
			k.reload(ctx)
		}
	}
}

// reload reads the file again; when its content changed and is valid, it
// becomes the file kept applied. Limiters and templates the new file no
// longer has stay in Redis (delete them through the API).
func (k *bootKeeper) reload(ctx context.Context) {
	data, err := os.ReadFile(k.file.path)
	if err != nil {
		if k.bad != err.Error() {
			k.bad = err.Error()
			k.log.Error("cannot read the boot file again; keeping the one applied", "file", k.file.path, "err", err)
		}
		return
	}
	raw := sha256.Sum256(data)
	sum := hex.EncodeToString(raw[:])
	if sum == k.file.sum || sum == k.bad {
		return
	}
	nb, err := parseBootFile(k.file.path, data)
	if err != nil {
		k.bad = sum
		k.log.Error("the boot file changed and is invalid; keeping the one applied", "err", err)
		return
	}
	k.bad = ""
	k.file, k.applied = nb, false
	k.check(ctx) // applies it
	k.log.Info("reloaded the boot file", "file", nb.path, "limiters", len(nb.limiters), "templates", len(nb.templates),
		"domains", nb.rules.Domains(), "rules", nb.rules.Len(), "applied", k.applied)
	if k.reloaded != nil {
		k.reloaded(nb)
	}
}

// check re-applies what Redis lost of the file. While Redis (or a shard) is
// down it logs once, when the outage starts, and once more when it is back;
// what a reachable shard lost is re-applied meanwhile.
func (k *bootKeeper) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	if !k.applied {
		if err := k.file.apply(ctx, k.store); err == nil {
			k.applied = true
			k.log.Warn("applied the boot file", "file", k.file.path, "limiters", len(k.file.limiters), "templates", len(k.file.templates))
		}
	}
	names, ids := k.file.names()
	lostL, lostT, err := k.store.Lost(ctx, names, ids)
	if len(lostL)+len(lostT) > 0 {
		if aerr := k.file.applySome(ctx, k.store, lostL, lostT); aerr != nil {
			err = errors.Join(err, aerr)
		} else {
			k.log.Warn("redis lost part of the boot configuration (a node restarted without persistence?): applied it again",
				"file", k.file.path, "limiters", lostL, "templates", lostT)
		}
	}
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		// shutting down
	case err != nil && !k.down:
		k.down = true
		k.log.Warn("redis unavailable: the boot configuration will be checked again when it is back", "err", err)
	case err == nil && k.down:
		k.down = false
		k.log.Info("redis is back; the boot configuration is in place", "file", k.file.path)
	}
}
