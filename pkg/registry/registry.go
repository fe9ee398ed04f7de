// Package registry maps the short model names nvmai-install accepts
// ("katcoder", "qwen36-8bit", ...) to a Hub repository, a revision and an
// architecture. The table is registry.json, compiled in: add a model by
// adding an entry there; the tests validate every entry.
package registry

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

//go:embed registry.json
var registryJSON []byte

// Architectures of registry entries. ArchQwen4Exp is converted but not yet
// run: runnableArchitectures says which ones an entry may be supported for.
const (
	ArchQwen35MoE = "qwen3_5_moe"
	ArchQwen35    = "qwen3_5"
	ArchQwen4Exp  = "qwen4_exp"
)

// runnableArchitectures are the architectures the runtime runs. An entry of
// any other architecture is listed only so its name is recognised and
// refused with its reason.
var runnableArchitectures = []string{ArchQwen35MoE, ArchQwen35, ArchQwen4Exp}

// Entry is one installable model.
type Entry struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases"`
	Title   string   `json:"title"`
	Repo    string   `json:"repo"`
	// Revision is a 40-hex commit, or a branch with RevisionNote saying why
	// no commit is pinned; the installer resolves a branch once and uses
	// the commit everywhere.
	Revision     string `json:"revision"`
	RevisionNote string `json:"revision_note"`
	// CommitPrefix is the start of a commit NVMAI is known to have used,
	// when only a prefix was recorded: a resolved commit that does not
	// start with it means the upstream release moved.
	CommitPrefix string `json:"commit_prefix"`
	Architecture string `json:"architecture"`
	Supported    bool   `json:"supported"`
	Reason       string `json:"reason"` // why not, when !Supported
	Widths       []int  `json:"widths"` // quantization widths offered (bits)
	Notes        string `json:"notes"`
	// Geometry names the nvmai-convert synth geometry (pkg/convert) whose
	// shape the model is taken to have: install and download sizes are
	// computed from it. Empty when no geometry fits.
	Geometry string `json:"geometry"`
	// DownloadBytes is an estimate of the bf16 download, for entries
	// without a Geometry to compute it from; 0 when unknown.
	DownloadBytes int64 `json:"download_bytes"`

	// Width is the width a spelling such as "katcoder-8bit" asked for,
	// 0 when the name carried none. Set by Lookup, never in the JSON.
	Width int `json:"-"`
}

// Pinned reports whether Revision is a full commit.
func (e Entry) Pinned() bool { return commitPattern.MatchString(e.Revision) }

// ErrUnknown and ErrUnsupported classify Lookup and ParseTarget errors.
var (
	ErrUnknown     = errors.New("unknown model")
	ErrUnsupported = errors.New("model not supported")
)

var (
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	prefixPattern = regexp.MustCompile(`^[0-9a-f]{7,39}$`)
	repoPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	// widthSuffix matches "-8bit", "_8bit", "-8", ":8-bit" at the end of a name.
	widthSuffix = regexp.MustCompile(`[-_:]([48])(-?bit)?$`)
)

var entries = mustLoad(registryJSON)

func mustLoad(b []byte) []Entry {
	es, err := parse(b)
	if err != nil {
		panic("registry.json: " + err.Error())
	}
	return es
}

func parse(b []byte) ([]Entry, error) {
	var doc struct {
		Version int     `json:"version"`
		Models  []Entry `json:"models"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("version %d, want 1", doc.Version)
	}
	return doc.Models, validate(doc.Models)
}

// validate checks every entry and that no name or alias is claimed twice.
func validate(es []Entry) error {
	seen := map[string]string{}
	for _, e := range es {
		if err := validateEntry(e); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		for _, n := range append([]string{e.Name}, e.Aliases...) {
			if !namePattern.MatchString(n) || widthSuffix.MatchString(n) {
				return fmt.Errorf("%s: name %q must be lowercase and must not end in a width", e.Name, n)
			}
			if other, dup := seen[n]; dup {
				return fmt.Errorf("name %q is claimed by %s and %s", n, other, e.Name)
			}
			seen[n] = e.Name
		}
	}
	return nil
}

func validateEntry(e Entry) error {
	switch {
	case !repoPattern.MatchString(e.Repo):
		return fmt.Errorf("repo %q is not org/name", e.Repo)
	case e.Revision == "":
		return errors.New("no revision")
	case !commitPattern.MatchString(e.Revision) && e.RevisionNote == "":
		return fmt.Errorf("revision %q is a branch, not a 40-hex commit: say why in revision_note", e.Revision)
	case e.CommitPrefix != "" && !prefixPattern.MatchString(e.CommitPrefix):
		return fmt.Errorf("commit_prefix %q is not a hex prefix", e.CommitPrefix)
	case e.Supported && !slices.Contains(runnableArchitectures, e.Architecture):
		return fmt.Errorf("supported, but the runtime does not run architecture %q", e.Architecture)
	case !e.Supported && e.Reason == "":
		return errors.New("unsupported without a reason")
	case e.Supported && e.Reason != "":
		return errors.New("supported entries take no reason")
	case len(e.Widths) == 0:
		return errors.New("no widths")
	case e.Geometry != "" && !namePattern.MatchString(e.Geometry):
		return fmt.Errorf("geometry %q is not a geometry name", e.Geometry)
	case e.DownloadBytes < 0:
		return fmt.Errorf("download_bytes %d is negative", e.DownloadBytes)
	}
	for _, w := range e.Widths {
		if w != 4 && w != 8 {
			return fmt.Errorf("width %d: nvmai writes 4- and 8-bit installs", w)
		}
	}
	return nil
}

// All returns every entry, supported or not, in registry order.
func All() []Entry {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = e
		out[i].Aliases = slices.Clone(e.Aliases)
		out[i].Widths = slices.Clone(e.Widths)
	}
	return out
}

// Lookup finds a model by name or alias, case-insensitively, with an
// optional width suffix ("katcoder-8bit" → katcoder, Width 8). An entry the
// runtime cannot run is returned with an error wrapping ErrUnsupported
// that carries its reason.
func Lookup(name string) (Entry, error) {
	spelled := strings.ToLower(strings.TrimSpace(name))
	base, width := spelled, 0
	if m := widthSuffix.FindStringSubmatchIndex(spelled); m != nil {
		width, _ = strconv.Atoi(spelled[m[2]:m[3]])
		base = spelled[:m[0]]
	}
	for _, e := range All() {
		if e.Name != base && !slices.Contains(e.Aliases, base) {
			continue
		}
		e.Width = width
		if !e.Supported {
			return e, fmt.Errorf("%w: %s: %s", ErrUnsupported, e.Name, e.Reason)
		}
		if width != 0 && !slices.Contains(e.Widths, width) {
			return e, fmt.Errorf("%w: %s comes in %s, not %d-bit", ErrUnsupported, e.Name, WidthList(e.Widths), width)
		}
		return e, nil
	}
	return Entry{}, fmt.Errorf("%w %q: known models are %s", ErrUnknown, name, strings.Join(supportedNames(), ", "))
}

// ParseTarget reads `NAME [4bit|8bit|both]`. The width may also be spelled
// into the name (katcoder-8bit); with neither, it is 4-bit.
func ParseTarget(args []string) (Entry, []int, error) {
	if len(args) == 0 || len(args) > 2 {
		return Entry{}, nil, fmt.Errorf("want NAME [4bit|8bit|both], got %d arguments; known models are %s",
			len(args), strings.Join(supportedNames(), ", "))
	}
	e, err := Lookup(args[0])
	if err != nil {
		return Entry{}, nil, err
	}
	widths := []int{4}
	if e.Width != 0 {
		widths = []int{e.Width}
	}
	if len(args) == 2 {
		asked, err := parseWidths(args[1], e)
		if err != nil {
			return Entry{}, nil, err
		}
		if e.Width != 0 && !slices.Equal(asked, widths) {
			return Entry{}, nil, fmt.Errorf("%q asks for %d-bit but %q for %s", args[0], e.Width, args[1], WidthList(asked))
		}
		widths = asked
	}
	return e, widths, nil
}

func parseWidths(arg string, e Entry) ([]int, error) {
	var widths []int
	switch strings.ToLower(strings.TrimSpace(arg)) {
	case "4bit", "4-bit", "4":
		widths = []int{4}
	case "8bit", "8-bit", "8":
		widths = []int{8}
	case "both", "all":
		widths = slices.Clone(e.Widths)
	default:
		return nil, fmt.Errorf("width %q: want 4bit, 8bit or both", arg)
	}
	for _, w := range widths {
		if !slices.Contains(e.Widths, w) {
			return nil, fmt.Errorf("%w: %s comes in %s, not %d-bit", ErrUnsupported, e.Name, WidthList(e.Widths), w)
		}
	}
	return widths, nil
}

// WidthList names widths for a message: "4-bit and 8-bit".
func WidthList(ws []int) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = strconv.Itoa(w) + "-bit"
	}
	return strings.Join(s, " and ")
}

func supportedNames() []string {
	var names []string
	for _, e := range entries {
		if e.Supported {
			names = append(names, e.Name)
		}
	}
	return names
}
