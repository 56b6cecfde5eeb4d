package layout_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// docs/kinds.md lists the production files a new rate kind takes
// ("Adding a rate kind, file by file") and counts them. The list is true
// when no other production file names a rate kind (a Go file by its
// limiter.Kind constant or its name in quotes, a Lua file by its KINDS
// row), and the count is the list's.
func TestRateKindsNamedWhereDocumented(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "kinds.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i := strings.Index(text, "## Adding a rate kind, file by file")
	if i < 0 {
		t.Fatal(`docs/kinds.md has no "Adding a rate kind, file by file"`)
	}
	section := text[i:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	steps := section[:strings.Index(section, "Tests besides")]
	var places []string // paths, <kind> standing for a kind's name
	for _, m := range regexp.MustCompile("`([a-z]+/[a-z_<>]+\\.(?:go|lua|yaml))`").FindAllStringSubmatch(steps, -1) {
		if !strings.HasSuffix(m[1], "_test.go") && !slices.Contains(places, m[1]) {
			places = append(places, m[1])
		}
	}
	folders := map[string]bool{}
	for _, p := range places {
		folders[filepath.Dir(p)] = true
	}
	m := regexp.MustCompile(`takes (\d+) production files in (\d+) folders`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal(`docs/kinds.md does not say "takes N production files in M folders"`)
	}
	if n, _ := strconv.Atoi(m[1]); n != len(places) {
		t.Errorf("docs/kinds.md counts %d production files, its list names %d: %v", n, len(places), places)
	}
	if n, _ := strconv.Atoi(m[2]); n != len(folders) {
		t.Errorf("docs/kinds.md counts %d folders, its list has %d", n, len(folders))
	}

	var rate []string
	for _, k := range limiter.Kinds() {
		if k.Class == limiter.ClassRate {
			rate = append(rate, string(k.Name))
		}
	}
	allowed := func(rel, kind string) bool {
		for _, p := range places {
			if strings.ReplaceAll(p, "<kind>", kind) == rel {
				return true
			}
		}
		return false
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		goFile := strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
		if strings.HasSuffix(name, ".html") {
			return checkPage(t, root, path)
		}
		if !goFile && !strings.HasSuffix(name, ".lua") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for _, k := range rate {
			named := strings.Contains(src, "KINDS."+k)
			if goFile {
				named = strings.Contains(src, "Kind"+strings.ToUpper(k[:1])+k[1:]) || strings.Contains(src, strconv.Quote(k))
			}
			if named && !allowed(rel, k) {
				t.Errorf("%s names the rate kind %s: docs/kinds.md's list does not have it (ask the kind table instead, or list the place)", rel, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkPage holds a page's script to what its signals say: it branches on
// the kind's flags and fields the server derives once (remaining, in_use,
// held, backlog_ns, ...), never on a kind's name, so that a new kind needs
// no change there. Tables keyed by kind (a form's fields) are data, not
// branches, and are allowed.
func checkPage(t *testing.T, root, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(root, path)
	var names []string
	for _, k := range limiter.Kinds() {
		names = append(names, regexp.QuoteMeta(string(k.Name)))
	}
	alt := strings.Join(names, "|")
	branch := regexp.MustCompile(`(?:kind\s*[!=]==?\s*["'](` + alt + `)["'])|(?:["'](` + alt + `)["']\s*[!=]==?\s*[A-Za-z_.]*kind)|(?:isRate\()`)
	for i, line := range strings.Split(string(b), "\n") {
		if m := branch.FindString(line); m != "" {
			t.Errorf("%s:%d branches on a kind's name (%s): read the signals' fields instead", filepath.ToSlash(rel), i+1, m)
		}
	}
	return nil
}
