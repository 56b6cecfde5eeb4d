package boot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/envoyrules"
)

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
