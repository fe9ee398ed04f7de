// Command testsummary reads `go test -json` on stdin and prints what plain
// `go test` would (one line per package, the output of failed tests), then
// writes a closing summary of the skipped tests to -summary: how many
// needed the reference fixtures (../shared/fixtures) and how many skipped
// for other reasons. scripts/test.sh prints it last, so a clone without the
// fixtures is told that "ok" everywhere did not run the oracle tests.
//
// It exits 1 when any test or package failed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json output (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
}

// maxEventLine bounds one JSON line: a test's single output line.
const maxEventLine = 16 << 20

type key struct{ pkg, test string }

type summary struct {
	out       io.Writer
	output    map[key]*strings.Builder // buffered output per test and per package ("")
	fixtures  []string                 // skipped tests that need the fixtures
	otherSkip map[string]int           // skip reason → count
	failed    bool
}

func main() {
	summaryPath := flag.String("summary", "", "write the skip summary to `FILE` (default: stdout, at the end)")
	flag.Parse()
	s := &summary{out: os.Stdout, output: map[key]*strings.Builder{}, otherSkip: map[string]int{}}
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	w := io.Writer(os.Stdout)
	if *summaryPath != "" {
		f, err := os.Create(*summaryPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(1)
		}
		defer f.Close()
		w = f
	}
	s.writeSkips(w)
	if s.failed {
		os.Exit(1)
	}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxEventLine)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// Not test2json (a toolchain message): pass it through.
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.handle(ev)
	}
	return sc.Err()
}

func (s *summary) handle(ev event) {
	k := key{ev.Package, ev.Test}
	switch ev.Action {
	case "build-output":
		fmt.Fprint(s.out, ev.Output)
	case "build-fail":
		s.failed = true
	case "output":
		b := s.output[k]
		if b == nil {
			b = &strings.Builder{}
			s.output[k] = b
		}
		b.WriteString(ev.Output)
	case "fail":
		s.failed = true
		s.flushFailure(k)
	case "skip":
		if ev.Test != "" {
			s.noteSkip(k)
		} else {
			s.printPackageLines(ev.Package, "?")
		}
		delete(s.output, k)
	case "pass":
		if ev.Test == "" {
			s.printPackageLines(ev.Package, "ok")
		}
		delete(s.output, k)
	}
}

// flushFailure prints a failed test's output, or for a package all its
// package-level output (panics, build errors, the FAIL line).
func (s *summary) flushFailure(k key) {
	if b := s.output[k]; b != nil {
		for line := range strings.SplitAfterSeq(b.String(), "\n") {
			if !strings.HasPrefix(line, "=== ") {
				fmt.Fprint(s.out, line)
			}
		}
	}
	delete(s.output, k)
}

// printPackageLines prints the package's result lines starting with prefix
// ("ok  \tpkg\t1.2s", "?   \tpkg\t[no test files]").
func (s *summary) printPackageLines(pkg, prefix string) {
	b := s.output[key{pkg, ""}]
	if b == nil {
		return
	}
	for line := range strings.SplitAfterSeq(b.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			fmt.Fprint(s.out, line)
		}
	}
}

func (s *summary) noteSkip(k key) {
	reason := "no reason given"
	if b := s.output[k]; b != nil {
		for line := range strings.SplitSeq(b.String(), "\n") {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- SKIP") {
				reason = t
				break
			}
		}
	}
	name := shortPkg(k.pkg) + "." + k.test
	if strings.Contains(strings.ToLower(reason), "fixture") {
		s.fixtures = append(s.fixtures, name)
		return
	}
	s.otherSkip[stripLocation(reason)]++
}

func (s *summary) writeSkips(w io.Writer) {
	if len(s.fixtures) == 0 {
		fmt.Fprintln(w, "0 reference-fixture tests skipped: the transformers oracle tests ran against ../shared/fixtures")
	} else {
		sort.Strings(s.fixtures)
		fmt.Fprintf(w, "%d reference-fixture tests skipped: ../shared/fixtures is absent, so the tests that compare with transformers did not run (%s)\n",
			len(s.fixtures), list(s.fixtures, 6))
		fmt.Fprintln(w, "  the fixtures are not in the repository: they come with the project's shared folder; place it beside the clone so ../shared/fixtures resolves (see the README)")
	}
	if n := total(s.otherSkip); n > 0 {
		reasons := make([]string, 0, len(s.otherSkip))
		for r := range s.otherSkip {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "%d other tests skipped: %s\n", n, list(reasons, 4))
	}
}

func list(items []string, most int) string {
	if len(items) <= most {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:most], "; "), len(items)-most)
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func shortPkg(p string) string {
	if i := strings.Index(p, "/pkg/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

// stripLocation drops the "file_test.go:12: " a skip message starts with.
func stripLocation(reason string) string {
	if file, rest, ok := strings.Cut(reason, ": "); ok && strings.Contains(file, ".go:") {
		return rest
	}
	return reason
}
