// Command notice writes NOTICE: the third-party Go modules the nvmai commands link, each with
// the licence named by its licence file in the Go module cache and that file's copyright lines,
// and the Go toolchain that builds them.
//
// What is linked comes from `go list -deps ./cmd/...` under the release build's settings
// (linux/amd64 and linux/arm64, CGO_ENABLED=0), so test-only modules are never listed. Each
// linked package is governed by the nearest licence file (LICENSE, LICENCE, COPYING, any
// extension) at or above its directory inside its module, so a module whose subpackages carry
// their own licences lists each file that applies. Nothing here touches the network: the module
// sources come from the module cache, which `go mod download` fills (.ci/run does).
//
//	go run ./scripts/internal/notice            # print NOTICE
//	go run ./scripts/internal/notice -w         # rewrite NOTICE in the module root
//	go run ./scripts/internal/notice -check     # fail when NOTICE is stale
//	go run ./scripts/internal/notice -check -bin DIR/nvmai-run ...
//	                                            # also fail unless the built binaries link exactly
//	                                            # these modules and this toolchain (go version -m)
//
// A licence file the classifier does not recognise stops the generator: a person reads it and
// adds its distinctive phrase to licencePhrases.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/receipt"
)

// releaseArches are the targets scripts/release.sh builds (its ARCHES); NOTICE covers their union.
var releaseArches = []string{"amd64", "arm64"}

const header = `nvmai — third-party notices

nvmai is licensed under the Apache License, Version 2.0 (see LICENSE). Its commands are built
with the Go toolchain and link the third-party Go modules listed below, each used unmodified
under its own licence. The full licence texts are in the files named below, in each module's
directory in the Go module cache (` + "`go env GOMODCACHE`" + `) and at its source repository.

This file is generated from what the release build (linux/amd64 and linux/arm64,
CGO_ENABLED=0) links, by ` + "`go run ./scripts/internal/notice -w`" + `; a test and
scripts/release.sh fail when it is stale. Do not edit it by hand.
`

const footer = `
The embedded test model (testdata/tiny-moe-fused) is a small model trained for this project's
tests; it is not shipped in the release archives.
`

func main() {
	write := flag.Bool("w", false, "rewrite NOTICE in the module root instead of printing it")
	check := flag.Bool("check", false, "exit 1 when NOTICE in the module root differs from what would be generated")
	bins := flag.Bool("bin", false, "with -check: the arguments are built commands; their go version -m must name exactly the modules and toolchain NOTICE names")
	flag.Parse()
	if *bins && !*check {
		fail(errors.New("-bin needs -check"))
	}
	if !*bins && flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q (built commands go after -check -bin)", flag.Args()))
	}
	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	n, err := collect(root)
	if err != nil {
		fail(err)
	}
	text := n.render()
	path := filepath.Join(root, "NOTICE")
	switch {
	case *check:
		if err := checkFile(path, text); err != nil {
			fail(err)
		}
		if *bins {
			if err := checkBinaries(n, flag.Args()); err != nil {
				fail(err)
			}
			fmt.Printf("notice: NOTICE is current and names exactly what the %d built commands link\n", flag.NArg())
		} else {
			fmt.Println("notice: NOTICE is current")
		}
	case *write:
		if err := receipt.WriteFileAtomic(path, []byte(text)); err != nil {
			fail(err)
		}
	default:
		fmt.Print(text)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "notice:", err)
	os.Exit(1)
}

// notices is everything NOTICE says.
type notices struct {
	goVersion string        // the toolchain go.mod pins, e.g. go1.27.3
	stdlib    licenceFile   // $GOROOT/LICENSE
	modules   []moduleEntry // sorted by path
}

type moduleEntry struct {
	path, version string
	replace       string // "path version" of a replacement, if go.mod replaces it
	licences      []licenceFile
	notice        string // the module's own NOTICE file, which Apache-2.0 §4(d) says to pass on
}

type licenceFile struct {
	rel        string   // path inside the module, e.g. "LICENSE" or "zstd/internal/xxhash/LICENSE.txt"
	ids        []string // SPDX identifiers found, in order of appearance
	copyrights []string
}

func (n *notices) render() string {
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, "\nGo standard library and runtime (%s)\n", n.goVersion)
	writeLicence(&b, n.stdlib, false)
	for _, m := range n.modules {
		fmt.Fprintf(&b, "\n%s %s", m.path, m.version)
		if m.replace != "" {
			fmt.Fprintf(&b, " => %s", m.replace)
		}
		fmt.Fprintf(&b, " (%s)\n", sourceURL(m.path))
		for _, l := range m.licences {
			writeLicence(&b, l, true)
		}
		if m.notice != "" {
			b.WriteString("  Its NOTICE file says:\n")
			for _, line := range strings.Split(strings.TrimRight(m.notice, "\n"), "\n") {
				b.WriteString(strings.TrimRight("    "+line, " \t") + "\n")
			}
		}
	}
	b.WriteString(footer)
	return b.String()
}

func writeLicence(b *strings.Builder, l licenceFile, named bool) {
	b.WriteString("  ")
	if named {
		b.WriteString(l.rel + ": ")
	}
	b.WriteString(strings.Join(l.ids, ", "))
	if len(l.ids) > 1 {
		b.WriteString(" (the file holds several licences, for different parts of the module)")
	}
	b.WriteString("\n")
	if len(l.copyrights) == 0 {
		b.WriteString("    The file names no copyright holder; see the source repository.\n")
	}
	for _, c := range l.copyrights {
		b.WriteString("    " + c + "\n")
	}
}

// sourceURL is where a module's source and licence live for a reader without a module cache.
func sourceURL(path string) string {
	parts := strings.Split(path, "/")
	if parts[0] == "github.com" && len(parts) >= 3 {
		return "https://" + strings.Join(parts[:3], "/")
	}
	if parts[0] == "golang.org" && len(parts) >= 3 && parts[1] == "x" {
		return "https://go.googlesource.com/" + parts[2]
	}
	return "https://pkg.go.dev/" + path
}

// listedPackage is the part of `go list -json` output the generator reads.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *struct {
		Path    string
		Version string
		Dir     string
		Main    bool
		Replace *struct {
			Path    string
			Version string
			Dir     string
		}
	}
}

func moduleRoot() (string, error) {
	out, err := goCmd("", nil, "env", "GOMOD")
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(out)
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: run it from the nvmai repository")
	}
	return filepath.Dir(gomod), nil
}

// goCmd runs the go command in dir with extra environment, returning stdout.
func goCmd(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %v: %s (is the module cache filled? run `go mod download`)",
			strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func collect(root string) (*notices, error) {
	goVersion, err := pinnedToolchain(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	n := &notices{goVersion: goVersion}
	goroot, err := goCmd(root, nil, "env", "GOROOT")
	if err != nil {
		return nil, err
	}
	if n.stdlib, err = readLicence(strings.TrimSpace(goroot), "LICENSE"); err != nil {
		return nil, err
	}

	type modKey struct{ path, version string }
	mods := map[modKey]*moduleEntry{}
	files := map[modKey]map[string]bool{} // licence files per module, by path inside it
	dirs := map[modKey]string{}
	for _, arch := range releaseArches {
		out, err := goCmd(root, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
			"list", "-deps", "-json=ImportPath,Dir,Standard,Module", "./cmd/...")
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(out))
		for {
			var p listedPackage
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("reading go list output: %v", err)
			}
			if p.Standard || p.Module == nil || p.Module.Main {
				continue
			}
			key := modKey{p.Module.Path, p.Module.Version}
			m := mods[key]
			if m == nil {
				m = &moduleEntry{path: p.Module.Path, version: p.Module.Version}
				dir := p.Module.Dir
				if r := p.Module.Replace; r != nil {
					m.replace = strings.TrimSpace(r.Path + " " + r.Version)
					dir = r.Dir
				}
				if dir == "" {
					return nil, fmt.Errorf("module %s %s has no directory: run `go mod download`", key.path, key.version)
				}
				mods[key], dirs[key], files[key] = m, dir, map[string]bool{}
			}
			rels, err := governingLicences(dirs[key], p.Dir)
			if err != nil {
				return nil, fmt.Errorf("package %s: %v", p.ImportPath, err)
			}
			for _, rel := range rels {
				files[key][rel] = true
			}
		}
	}
	for key, m := range mods {
		rels := make([]string, 0, len(files[key]))
		for rel := range files[key] {
			rels = append(rels, rel)
		}
		// The module's own licence first, then subpackages' in path order.
		sort.Slice(rels, func(i, j int) bool {
			di, dj := strings.Count(rels[i], "/"), strings.Count(rels[j], "/")
			if (di == 0) != (dj == 0) {
				return di == 0
			}
			return rels[i] < rels[j]
		})
		for _, rel := range rels {
			l, err := readLicence(dirs[key], rel)
			if err != nil {
				return nil, fmt.Errorf("module %s %s: %v", m.path, m.version, err)
			}
			m.licences = append(m.licences, l)
		}
		if m.notice, err = moduleNotice(dirs[key]); err != nil {
			return nil, fmt.Errorf("module %s %s: %v", m.path, m.version, err)
		}
		n.modules = append(n.modules, *m)
	}
	sort.Slice(n.modules, func(i, j int) bool {
		if n.modules[i].path != n.modules[j].path {
			return n.modules[i].path < n.modules[j].path
		}
		return n.modules[i].version < n.modules[j].version
	})
	return n, nil
}

var toolchainLine = regexp.MustCompile(`(?m)^toolchain\s+(go\S+)\s*$`)
var goLine = regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`)

// pinnedToolchain is the toolchain go.mod pins (GOTOOLCHAIN=auto builds with it), else its go line.
func pinnedToolchain(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	if m := toolchainLine.FindSubmatch(data); m != nil {
		return string(m[1]), nil
	}
	if m := goLine.FindSubmatch(data); m != nil {
		return "go" + string(m[1]), nil
	}
	return "", fmt.Errorf("%s has neither a toolchain nor a go line", gomod)
}

var noticeName = regexp.MustCompile(`(?i)^notice([.\-_].*)?$`)

// moduleNotice is the text of the NOTICE file(s) at a module's root, if it has any.
func moduleNotice(modDir string) (string, error) {
	entries, err := os.ReadDir(modDir)
	if err != nil {
		return "", err
	}
	var texts []string
	for _, e := range entries {
		if e.Type().IsRegular() && noticeName.MatchString(e.Name()) {
			data, err := os.ReadFile(filepath.Join(modDir, e.Name()))
			if err != nil {
				return "", err
			}
			texts = append(texts, strings.ReplaceAll(string(data), "\r\n", "\n"))
		}
	}
	return strings.Join(texts, "\n"), nil
}

var licenceName = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.\-_].*)?$`)

// governingLicences finds the licence files nearest to pkgDir, walking up to modDir; it returns
// their paths relative to modDir.
func governingLicences(modDir, pkgDir string) ([]string, error) {
	rel, err := filepath.Rel(modDir, pkgDir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("directory %s is not inside its module %s", pkgDir, modDir)
	}
	for dir := rel; ; dir = filepath.Dir(dir) {
		entries, err := os.ReadDir(filepath.Join(modDir, dir))
		if err != nil {
			return nil, err
		}
		var found []string
		for _, e := range entries {
			if e.Type().IsRegular() && licenceName.MatchString(e.Name()) {
				found = append(found, filepath.ToSlash(filepath.Join(dir, e.Name())))
			}
		}
		if len(found) > 0 {
			return found, nil
		}
		if dir == "." {
			return nil, fmt.Errorf("no LICENSE, LICENCE or COPYING file in %s or above it inside the module: "+
				"nvmai may not redistribute code whose licence it cannot name", filepath.Join(modDir, rel))
		}
	}
}

func readLicence(dir, rel string) (licenceFile, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	data, err := os.ReadFile(path)
	if err != nil {
		return licenceFile{}, err
	}
	ids := classify(string(data))
	if len(ids) == 0 {
		return licenceFile{}, fmt.Errorf("%s: licence not recognised (MIT, BSD-2/3-Clause, Apache-2.0, MPL-2.0, ISC are); "+
			"read it, and if nvmai may link it, add its distinctive phrase to licencePhrases in scripts/internal/notice", path)
	}
	return licenceFile{rel: rel, ids: ids, copyrights: copyrightLines(string(data))}, nil
}

// licencePhrases are phrases only the full text of each licence holds, in normalised form
// (lower case, runs of anything but letters and digits turned into one space), so line breaks,
// quoting ("> ") and bullets do not matter. A licence matches when all its phrases appear.
var licencePhrases = []struct {
	id      string
	phrases []string
}{
	{"Apache-2.0", []string{"apache license", "version 2 0", "grant of patent license"}},
	{"MPL-2.0", []string{"mozilla public license", "version 2 0", "covered software"}},
	{"MIT", []string{"permission is hereby granted free of charge to any person obtaining a copy"}},
	{"ISC", []string{"permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted"}},
	{"BSD-3-Clause", []string{"redistribution and use in source and binary forms", "may be used to endorse or promote products derived from this software"}},
	{"BSD-2-Clause", []string{"redistribution and use in source and binary forms"}},
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

func normalise(text string) string {
	return " " + strings.TrimSpace(nonAlnum.ReplaceAllString(strings.ToLower(text), " ")) + " "
}

// classify names the licences a licence file holds, in order of first appearance. BSD-2-Clause is
// named only where no BSD-3-Clause clause is present, since its phrase is a prefix of the other.
func classify(text string) []string {
	norm := normalise(text)
	type hit struct {
		id  string
		pos int
	}
	var hits []hit
	has := map[string]bool{}
	for _, l := range licencePhrases {
		first := -1
		for _, p := range l.phrases {
			i := strings.Index(norm, " "+p+" ")
			if i < 0 {
				first = -1
				break
			}
			if first < 0 || i < first {
				first = i
			}
		}
		if first < 0 || (l.id == "BSD-2-Clause" && has["BSD-3-Clause"]) {
			continue
		}
		has[l.id] = true
		hits = append(hits, hit{l.id, first})
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].pos < hits[j].pos })
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.id
	}
	return ids
}

// copyrightStatement is a line that states a copyright: "Copyright" then (c), ©, or a year.
// The Apache appendix's template line ("Copyright [yyyy] [name of copyright owner]") does not match.
var copyrightStatement = regexp.MustCompile(`(?i)^copyright\s+(\(c\)|©|\d{4})`)

func copyrightLines(text string) []string {
	seen := map[string]bool{}
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), ">#/* \t"))
		line = strings.Join(strings.Fields(line), " ")
		if !copyrightStatement.MatchString(line) || seen[line] {
			continue
		}
		seen[line] = true
		lines = append(lines, line)
	}
	return lines
}

func checkFile(path, want string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%v; generate it with `go run ./scripts/internal/notice -w`", err)
	}
	if string(got) == want {
		return nil
	}
	return fmt.Errorf("%s is stale (%s); regenerate it with `go run ./scripts/internal/notice -w` and commit it",
		path, firstDifference(string(got), want))
}

// firstDifference says where two texts first differ, by line.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, should be %q", i+1, gl, wl)
		}
	}
	return "they differ"
}

// checkBinaries compares the modules and toolchain that `go version -m` reports for each built
// command with what NOTICE names: every module it links must be listed, and the commands together
// must link every listed module.
func checkBinaries(n *notices, paths []string) error {
	if len(paths) == 0 {
		return errors.New("-bin needs the built commands as arguments")
	}
	listed := map[string]bool{}
	for _, m := range n.modules {
		listed[m.path+" "+m.version] = true
	}
	linked := map[string]bool{}
	var problems []string
	for _, path := range paths {
		out, err := goCmd("", nil, "version", "-m", path)
		if err != nil {
			return err
		}
		goVersion, deps, err := parseVersionM(out)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if goVersion != n.goVersion {
			problems = append(problems, fmt.Sprintf("%s was built with %s, NOTICE names %s (go.mod's toolchain)", path, goVersion, n.goVersion))
		}
		for _, d := range deps {
			linked[d] = true
			if !listed[d] {
				problems = append(problems, fmt.Sprintf("%s links %s, which NOTICE does not list", path, d))
			}
		}
	}
	for _, m := range n.modules {
		if key := m.path + " " + m.version; !linked[key] {
			problems = append(problems, fmt.Sprintf("NOTICE lists %s, which none of the built commands links", key))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n  "))
	}
	return nil
}

// parseVersionM reads `go version -m` output: the Go version and the "path version" of each
// dependency module (a replaced module is named by its own path and version, as NOTICE does).
func parseVersionM(out string) (goVersion string, deps []string, err error) {
	lines := strings.Split(out, "\n")
	first := strings.SplitN(lines[0], ": ", 2)
	if len(first) != 2 || !strings.HasPrefix(first[1], "go") {
		return "", nil, fmt.Errorf("not a Go binary with build information: %q", lines[0])
	}
	goVersion = strings.TrimSpace(first[1])
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" {
			deps = append(deps, f[1]+" "+f[2])
		}
	}
	return goVersion, deps, nil
}
