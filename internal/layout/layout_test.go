// Package layout_test checks the one-way arrows between limitd's packages:
// each folder may import only the packages below it (README, "Layout").
package layout_test

import (
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/limitd/limitd"

// may lists, for each package (its folder, "." for the module's root, the
// vocabulary every layer speaks), the limitd packages its non-test files
// may import. A package missing here may import nothing of
// limitd's; a new package must be added.
var may = map[string][]string{
	".":                            {"limiter"},
	"limiter":                      nil,
	"lua":                          nil,
	"internal/clockoffset":         nil,
	"internal/testkit/redistest":   nil,
	"internal/testkit/faultproxy":  nil,
	"internal/testkit/rounds":      nil,
	"internal/testkit/logtest":     nil,
	"internal/testkit/storetest":   {"store", "internal/testkit/redistest"},
	"internal/testkit/browsertest": nil,
	"internal/promreg":             nil,
	"internal/certfiles":           nil,
	"internal/envvar":              nil,
	"internal/tracing":             {"internal/envvar"},
	"internal/testkit/tlstest":     nil,
	"internal/testkit/xdstest":     nil,
	"internal/testkit/alerttest":   {"internal/testkit/redistest"},
	"internal/testkit/grpctest":    nil,
	"internal/testkit/metricstest": nil,
	"internal/httpjson":            {"wire"},
	"wire":                         {"limiter"},
	"store":                        {".", "limiter", "lua", "internal/clockoffset"},
	"core":                         {".", "store", "limiter"},
	"api":                          {".", "core", "limiter", "wire", "internal/promreg"},
	"envoyrules":                   {".", "core", "limiter"},
	"grpcapi":                      {".", "core", "limiter", "envoyrules", "internal/promreg"},
	"internal/coremetrics":         {"core", "internal/promreg"},
	"client":                       {".", "limiter", "wire", "internal/clockoffset"},
	"httplimit":                    {".", "client", "wire", "limiter"},
	"client/clientmetrics":         {"client"},
	"client/redisclient":           {".", "client", "store"},
	"internal/boot":                {".", "envoyrules", "core", "limiter"},
	"internal/xds":                 {"internal/boot", "envoyrules"},
	"internal/refenv":              {"core", "grpcapi", "internal/boot", "internal/certfiles", "internal/envvar", "internal/tracing", "internal/xds"},
	"internal/bench":               {".", "client", "client/redisclient", "store", "limiter", "wire", "internal/clockoffset", "internal/httpjson"},
	"cmd/limitd":                   {".", "api", "grpcapi", "core", "store", "limiter", "wire", "internal/bench", "internal/boot", "internal/coremetrics", "internal/httpjson", "internal/xds", "internal/certfiles", "internal/envvar", "internal/refenv", "internal/tracing"},
	"integration":                  nil, // tests only
}

func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a test's scratch folder, gone meanwhile
			}
			return err
		}
		if d.IsDir() {
			// The go tool ignores folders named _… or .…, and testdata.
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		allowed, known := may[rel]
		if !known {
			t.Errorf("%s: package %s is not in the layout table", path, rel)
			return nil
		}
		seen[rel] = true
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(p, module+"/")
			if p == module {
				dep, ok = ".", true
			}
			if ok && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s: %s may import only %v", filepath.Join(rel, filepath.Base(path)), dep, rel, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"limiter", "store", "core", "api", "client", "wire"} {
		if !seen[p] {
			t.Errorf("no source file found in %s: is the walk rooted at the module?", p)
		}
	}
}
