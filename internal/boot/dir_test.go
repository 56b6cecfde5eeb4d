package boot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeDir writes files (name → content) into a new directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every *.yaml of a runtime directory is one domain; together they are the
// rules. Other files, subdirectories and (with IgnoreDotFiles) dot files
// are not read.
func TestLoadDir(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"a.yaml":       "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yml":        "domain: b\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: open\n    rate_limit: {unlimited: true}\n",
		"README.md":    "not a config",
		".hidden.yaml": "domain: hidden\ndescriptors: []\n",
	})
	if err := os.Mkdir(filepath.Join(dir, "..2024_01_01"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..2024_01_01", "a.yaml"), []byte("domain: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadDir(DirSource{Dir: dir, IgnoreDotFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.Rules.Domains() != 2 || !f.Rules.Has("a") || !f.Rules.Has("b") || f.Rules.Len() != 3 || len(f.Templates) != 2 {
		t.Errorf("domains %d, rules %d, templates %d; want a and b, 3 rules, 2 templates", f.Rules.Domains(), f.Rules.Len(), len(f.Templates))
	}
	f, err = LoadDir(DirSource{Dir: dir})
	if err != nil || !f.Rules.Has("hidden") {
		t.Errorf("without IgnoreDotFiles a dot file is read: %v", err)
	}
	sum1, _, _ := DirSource{Dir: dir}.Read()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sum2, _, _ := (DirSource{Dir: dir}).Read(); sum2 != sum1 {
		t.Error("a file that is not read changed the sum")
	}
	if _, err := LoadDir(DirSource{Dir: filepath.Join(dir, "nope")}); err == nil {
		t.Error("a missing directory loaded")
	}
}

// A runtime directory's errors name the file, the line and the field.
func TestLoadDirErrors(t *testing.T) {
	good := "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"unit", map[string]string{"a.yaml": good, "b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n"},
			"b.yaml: line 5: descriptors[0].rate_limit.unit: must be one of second"},
		{"unknown field", map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    colour: red\n"},
			`a.yaml: line 4: unknown field "colour" (in descriptors[0])`},
		{"same domain twice", map[string]string{"a.yaml": good, "z.yaml": "\ndomain: a\n"},
			`z.yaml: line 2: domain: "a" is declared by a.yaml too`},
		{"empty", map[string]string{"a.yaml": ""}, "a.yaml: is empty"},
		{"no domain", map[string]string{"a.yaml": "descriptors: []\n"}, "a.yaml: domain: must not be empty"},
		{"syntax", map[string]string{"a.yaml": "domain: [\n"}, "a.yaml: line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadDir(DirSource{Dir: writeDir(t, tc.files)})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got %v\nwant %s…", err, tc.want)
			}
		})
	}
}
