package main

// The pages as a whole: every snippet checked or marked, links that lead
// somewhere, the go blocks that show their output: see readme_test.go.

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
)

// readmeMaxLines is as long as the README may grow: it is the front page
// (what limitd is, how to start, one example per kind, where to read on);
// the rest belongs in a page under docs/.
const readmeMaxLines = 400

// TestDocsSnippetsCovered: every block of every page is one the tests check
// (go, yaml, sh) or is marked <!-- not run: REASON --> with a reason.
func TestDocsSnippetsCovered(t *testing.T) {
	blocks, _ := readDocs(t)
	var ps readmeProblems
	marked := 0
	for _, b := range blocks {
		switch {
		case b.notRun == " ":
			ps.add(b.line, "a %q block marked not run without a reason: say why in <!-- not run: REASON -->", b.lang)
		case b.notRun != "":
			marked++
			t.Logf("%s: not run: %s", docPos(b.line), b.notRun)
		case b.lang == "go", b.lang == "yaml", b.lang == "yml", b.lang == "sh", b.lang == "bash", b.lang == "shell":
		default:
			ps.add(b.line, "a %q block is neither run nor checked: make it go, yaml or sh, or mark it <!-- not run: REASON -->", b.lang)
		}
	}
	ps.report(t)
	if len(blocks) == 0 || marked == len(blocks) {
		t.Errorf("%d blocks, %d of them not run: the pages should show tested examples", len(blocks), marked)
	}
}

// TestREADMEIsShort keeps the README a front page.
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot, readmeFile))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail into a page under docs/", n, readmeMaxLines)
	}
	if !strings.Contains(text, "\n## Contents\n") {
		t.Error("README.md has no ## Contents")
	}
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeadings = regexp.MustCompile("(?m)^#+ +(.*)$")
)

// mdAnchor is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces made hyphens.
func mdAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdAnchors are the anchors of a page's headings, outside its blocks.
func mdAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	for _, l := range mdProse(text) {
		if m := mdHeadings.FindStringSubmatch(l.text); m != nil {
			anchors[mdAnchor(m[1])] = true
		}
	}
	return anchors
}

type mdLine struct {
	n    int
	text string
}

// mdProse are a page's lines outside its fenced blocks.
func mdProse(text string) (lines []mdLine) {
	in := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			lines = append(lines, mdLine{i + 1, l})
		}
	}
	return lines
}

// TestDocsLinks: every relative link of every page names a file of the
// repository, and a heading of it where it names one.
func TestDocsLinks(t *testing.T) {
	root, err := filepath.Abs(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		return string(b), err
	}
	var ps readmeProblems
	links := 0
	for i, page := range docFiles() {
		text, err := read(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range mdProse(text) {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, frag, _ := strings.Cut(target, "#")
				rel := page
				if file != "" {
					rel = path.Join(path.Dir(page), file)
				}
				if strings.HasPrefix(rel, "../") {
					ps.add(i*docLineBase+l.n, "link %s: leaves the repository", target)
					continue
				}
				body, err := read(rel)
				if err != nil {
					if _, statErr := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); statErr != nil {
						ps.add(i*docLineBase+l.n, "link %s: no such file %s", target, rel)
					}
					continue // a directory
				}
				if frag != "" && strings.HasSuffix(rel, ".md") && !mdAnchors(body)[frag] {
					ps.add(i*docLineBase+l.n, "link %s: %s has no heading #%s", target, rel, frag)
				}
			}
		}
	}
	ps.report(t)
	if links == 0 {
		t.Error("no relative link found: the README should lead to the pages")
	}
}

// TestDocsGoOutput runs every go block with a main whose last comment is
// "// Output:" and the lines it prints, as go test runs an example.
func TestDocsGoOutput(t *testing.T) {
	t.Parallel() // each builds or serves on its own: a scratch folder, a free port
	blocks, _ := readREADME(t)
	ran := 0
	for _, b := range blocks {
		want, ok := goBlockOutput(b)
		if !ok {
			continue
		}
		ran++
		root, dir := moduleScratch(t, "_readme-output-")
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(snippetFile(b)), 0o644); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := goCommand(ctx, t, root, "run", "./"+filepath.ToSlash(rel)).Output()
		cancel()
		if err != nil {
			t.Errorf("%s: go run: %v", docPos(b.line), err)
			continue
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s: the block prints\n%s\nits // Output: says\n%s", docPos(b.line), got, want)
		}
	}
	if ran == 0 {
		t.Error("no go block with // Output: found (docs/concepts.md shows one)")
	}
}

// goBlockOutput is what a go block with a main says it prints: the comment
// lines after its "// Output:" line.
func goBlockOutput(b mdBlock) (string, bool) {
	if b.lang != "go" || !goMainFunc.MatchString(strings.Join(b.lines, "\n")) {
		return "", false
	}
	for i, l := range b.lines {
		if strings.TrimSpace(l) != "// Output:" {
			continue
		}
		var want []string
		for _, o := range b.lines[i+1:] {
			o = strings.TrimSpace(o)
			text, ok := strings.CutPrefix(o, "//")
			if !ok {
				break
			}
			want = append(want, strings.TrimPrefix(text, " "))
		}
		return strings.Join(want, "\n"), true
	}
	return "", false
}
