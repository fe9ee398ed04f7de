// Package archtest checks that imports point down the house
// (docs/development.md, "The engine surface"): a test here fails on any
// import that runs back up.
package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nvmai/nvmai"

// pkgInfo is what go list says of one package (non-test files).
type pkgInfo struct {
	dir     string
	imports []string // direct
	deps    []string // transitive
	files   []string
}

func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}\t{{join .GoFiles \" \"}}", module+"/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	pkgs := map[string]pkgInfo{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("go list line %q", line)
		}
		pkgs[f[0]] = pkgInfo{dir: f[1], imports: strings.Fields(f[2]), deps: strings.Fields(f[3]), files: strings.Fields(f[4])}
	}
	return pkgs
}

// Packages are named by their path inside the module.
func rel(path string) string { return strings.TrimPrefix(path, module+"/") }

// architectures are the packages that implement a model (or its blocks)
// for a device; the runtime loads them through package model's registry.
var architectures = []string{"pkg/models/qwen35", "pkg/models/qwen38", "pkg/models/blocks", "pkg/gpu"}

func underRuntime(p string) bool {
	return p == "pkg/runtime" || strings.HasPrefix(p, "pkg/runtime/")
}

// knownExceptions are imports a rule forbids that the tree still has,
// each with the change that removes it.
var knownExceptions = map[string]string{}

type rule struct {
	name   string
	from   func(p string) bool // the packages the rule constrains
	to     func(from, dep string) bool
	direct bool // direct imports only (else every dependency)
}

var protocols = []string{"pkg/server/openai", "pkg/server/anthropic", "pkg/server/responses"}

func protocolOf(p string) string {
	for _, pr := range protocols {
		if p == pr || strings.HasPrefix(p, pr+"/") {
			return pr
		}
	}
	return ""
}

var rules = []rule{
	{name: "the expert cache sits below the runtime and every architecture",
		from: func(p string) bool { return p == "pkg/expertcache" },
		to:   func(_, d string) bool { return underRuntime(d) }},
	{name: "the engine surface names no runtime or architecture package",
		from: func(p string) bool { return p == "pkg/model" },
		to:   func(_, d string) bool { return underRuntime(d) }},
	{name: "an architecture does not import the runtime that loads it",
		from: func(p string) bool { return slices.Contains(architectures, p) },
		to:   func(_, d string) bool { return d == "pkg/runtime" }, direct: true},
	{name: "the commands import no architecture (the registry wires them)",
		from: func(p string) bool { return strings.HasPrefix(p, "cmd/") },
		to:   func(_, d string) bool { return slices.Contains(architectures, d) && d != "pkg/gpu" }, direct: true},
	{name: "the HTTP host knows no protocol (each mounts on it)",
		from: func(p string) bool { return p == "pkg/server/httpapi" },
		to:   func(_, d string) bool { return protocolOf(d) != "" }},
	{name: "no protocol adapter imports another",
		from: func(p string) bool { return protocolOf(p) != "" },
		to: func(f, d string) bool {
			return protocolOf(d) != "" && protocolOf(d) != protocolOf(f)
		}, direct: true},
}

func TestImportsPointDown(t *testing.T) {
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for path, info := range pkgs {
		from := rel(path)
		for _, r := range rules {
			if !r.from(from) {
				continue
			}
			deps := info.deps
			if r.direct {
				deps = info.imports
			}
			for _, d := range deps {
				if !strings.HasPrefix(d, module+"/") || !r.to(from, rel(d)) {
					continue
				}
				edge := from + " -> " + rel(d)
				if why, ok := knownExceptions[edge]; ok {
					seen[edge] = true
					t.Logf("known exception %s: %s", edge, why)
					continue
				}
				t.Errorf("%s: %s runs back up (%s)", r.name, edge, info.dir)
			}
		}
	}
	for edge := range knownExceptions {
		if !seen[edge] {
			t.Logf("known exception %s is gone: drop it from knownExceptions", edge)
		}
	}
}

// The one place a command names a device engine is a blank import that
// registers it: nothing of the GPU engine is called from cmd.
func TestCommandsImportTheGPUEngineBlank(t *testing.T) {
	pkgs := listPackages(t)
	for path, info := range pkgs {
		if !strings.HasPrefix(rel(path), "cmd/") || !slices.Contains(info.imports, module+"/pkg/gpu") {
			continue
		}
		for _, name := range info.files {
			file := filepath.Join(info.dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == module+"/pkg/gpu" && (imp.Name == nil || imp.Name.Name != "_") {
					t.Errorf("%s imports pkg/gpu by name; import it blank (it registers itself with package model)", file)
				}
			}
		}
	}
}
