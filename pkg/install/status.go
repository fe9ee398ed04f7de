package install

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/registry"
)

// maxStatusDepth bounds the search for installs under the models directory:
// MODELS/install and MODELS/group/install.
const maxStatusDepth = 2

// Found is an install found under the models directory, as its manifest
// describes it (the folder name proves nothing).
type Found struct {
	Dir     string
	ModelID string
	Repo    string // source repository; "" when converted from a local folder
	Commit  string
	Bits    int
}

// Staging is a hidden directory a converter process that is gone left
// next to an install: its unfinished staging (.NAME.partial-PID), or the
// install it was replacing (.NAME.old-PID, left by a kill during publish).
type Staging struct {
	Dir   string
	PID   int
	Bytes int64
	// Replaced marks a .NAME.old-PID: the previous install of Final.
	Replaced bool
	// Final is the install directory it belongs to (NAME's path).
	Final string
	// FinalMissing: Final does not exist, so a Replaced directory is the
	// only copy of that install.
	FinalMissing bool
}

// Sizes are a model's download and install sizes, estimated from its
// registry geometry (0 = unknown).
type Sizes struct {
	Download int64
	Install  map[int]int64 // width → bytes
}

// Status is one line of the registry status table.
type Status struct {
	Entry     registry.Entry
	Installed map[int]Found // width → the install of this model at that width
	Sizes     Sizes
}

// StatusReport is what `nvmai-install` without arguments shows.
type StatusReport struct {
	ModelsDir string
	Models    []Status
	Others    []Found   // installs that match no registry entry
	Stale     []Staging // leftovers of interrupted conversions
}

// ReadStatus lists every registry entry with the installs under modelsDir
// that are of it (by the manifest's model id or source repository), the
// other installs there, and stale staging directories. A missing modelsDir
// is simply empty.
func ReadStatus(modelsDir string) (*StatusReport, error) {
	found, stale, err := scanModels(modelsDir)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{ModelsDir: modelsDir, Stale: stale}
	claimed := map[string]bool{}
	for _, e := range registry.All() {
		s := Status{Entry: e, Installed: map[int]Found{}, Sizes: EntrySizes(e)}
		for _, f := range found {
			if isOf(f, e) && !claimed[f.Dir] {
				if _, dup := s.Installed[f.Bits]; !dup {
					s.Installed[f.Bits] = f
					claimed[f.Dir] = true
				}
			}
		}
		rep.Models = append(rep.Models, s)
	}
	for _, f := range found {
		if !claimed[f.Dir] {
			rep.Others = append(rep.Others, f)
		}
	}
	return rep, nil
}

// isOf reports whether install f is of registry entry e: nvmai-install
// records the registry name as the model id, and any install converted
// from the entry's repository counts too; a local conversion counts only
// under the registry name.
func isOf(f Found, e registry.Entry) bool {
	if !e.Supported {
		return false
	}
	if f.Repo != "" {
		return strings.EqualFold(f.Repo, e.Repo) && (f.ModelID == e.Name || !otherEntryNamed(f.ModelID, e.Repo))
	}
	return f.ModelID == e.Name
}

// otherEntryNamed reports whether another supported entry of repo is
// called name (two registry names may share a repository).
func otherEntryNamed(name, repo string) bool {
	for _, e := range registry.All() {
		if e.Supported && e.Name == name && strings.EqualFold(e.Repo, repo) {
			return true
		}
	}
	return false
}

// EntrySizes computes e's install sizes from its geometry and its download
// as the 16-bit (bf16) size of the same weights; the registry's
// download_bytes stands in when there is no geometry.
func EntrySizes(e registry.Entry) Sizes {
	s := Sizes{Download: e.DownloadBytes, Install: map[int]int64{}}
	if e.Geometry == "" {
		return s
	}
	for _, w := range append(slices.Clone(e.Widths), 16) {
		m, err := convert.PlanSynth(convert.SynthOptions{Geometry: e.Geometry, Bits: w})
		if err != nil {
			continue
		}
		var n int64
		for _, f := range m.Files {
			n += f.Size
		}
		if w == 16 {
			s.Download = n
		} else {
			s.Install[w] = n
		}
	}
	return s
}

func scanModels(modelsDir string) ([]Found, []Staging, error) {
	var found []Found
	var stale []Staging
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if depth == 0 && os.IsNotExist(err) {
				return nil
			}
			return err
		}
		for _, de := range entries {
			p := filepath.Join(dir, de.Name())
			if st, ok := staleStaging(p, de.Name()); ok {
				stale = append(stale, st)
				continue
			}
			if strings.HasPrefix(de.Name(), ".") {
				continue
			}
			if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
				continue
			}
			if f, ok := readFound(p); ok {
				found = append(found, f)
			} else if depth+1 < maxStatusDepth {
				if err := walk(p, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(modelsDir, 0)
	sort.Slice(found, func(i, j int) bool { return found[i].Dir < found[j].Dir })
	return found, stale, err
}

func readFound(dir string) (Found, bool) {
	if _, err := os.Stat(filepath.Join(dir, packexperts.ManifestFile)); err != nil {
		return Found{}, false
	}
	f := Found{Dir: dir, ModelID: "(unreadable manifest.json)"}
	if m, _, err := packexperts.ReadManifest(dir); err == nil {
		f.ModelID, f.Repo, f.Commit, f.Bits = m.ModelID, m.Source.Repo, m.Source.Revision, m.Bits
	}
	return f, true
}

// stagingName is the converter's staging directory, .FINAL.partial-PID, or
// the install it replaces set aside, .FINAL.old-PID.
var stagingName = regexp.MustCompile(`^\.(.+)\.(partial|old)-([0-9]{1,10})$`)

func staleStaging(path, name string) (Staging, bool) {
	m := stagingName.FindStringSubmatch(name)
	if m == nil {
		return Staging{}, false
	}
	pid, err := strconv.Atoi(m[3])
	if err != nil || pid <= 0 || processAlive(pid) {
		return Staging{}, false
	}
	if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
		return Staging{}, false
	}
	st := Staging{Dir: path, PID: pid, Bytes: treeBytes(path), Replaced: m[2] == "old", Final: filepath.Join(filepath.Dir(path), m[1])}
	if _, err := os.Lstat(st.Final); os.IsNotExist(err) {
		st.FinalMissing = true
	}
	return st, true
}

func treeBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Write renders the report as the status table and its notes.
func (r *StatusReport) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODEL\tREPO\tDOWNLOAD\tINSTALL 4-BIT\tINSTALL 8-BIT\tINSTALLED\tNOTE")
	for _, s := range r.Models {
		note := ""
		if !s.Entry.Supported {
			note = "not runnable yet: " + s.Entry.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Entry.Name, s.Entry.Title, s.Entry.Repo,
			estimate(s.Sizes.Download), widthSize(s, 4), widthSize(s, 8), installedList(s), note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nsizes are estimates (~): installs computed from the model's geometry (docs/synthetic.md), "+
		"the download as the same weights in bf16; vision and MTP tensors in the repository add a little")
	r.writeOthers(w)
	r.writeStale(w)
	_, err := fmt.Fprintf(w, "\ninstall one with: nvmai-install NAME [4bit|8bit|both]   (models dir: %s)\n", r.ModelsDir)
	return err
}

func (r *StatusReport) writeOthers(w io.Writer) {
	if len(r.Others) == 0 {
		return
	}
	fmt.Fprintf(w, "\nother installs in %s (no registry entry; by manifest):\n", r.ModelsDir)
	for _, f := range r.Others {
		from := "converted from a local folder"
		if f.Repo != "" {
			from = "from " + f.Repo + "@" + shortCommit(f.Commit)
		}
		fmt.Fprintf(w, "  %s  %s, %d-bit, %s\n", f.Dir, f.ModelID, f.Bits, from)
	}
}

func (r *StatusReport) writeStale(w io.Writer) {
	if len(r.Stale) == 0 {
		return
	}
	var n int64
	for _, s := range r.Stale {
		n += s.Bytes
	}
	fmt.Fprintf(w, "\nleft by interrupted conversions (their process is gone), %s in all; the next successful conversion to the same output removes them:\n", gib(n))
	for _, s := range r.Stale {
		switch {
		case s.Replaced && s.FinalMissing:
			fmt.Fprintf(w, "  %s  %s, the previous install of %s, which is missing (process %d died while replacing it); restore it with: mv %s %s\n",
				s.Dir, gib(s.Bytes), s.Final, s.PID, shellQuote(s.Dir), shellQuote(s.Final))
		case s.Replaced:
			fmt.Fprintf(w, "  %s  %s, an install that %s replaced, not yet deleted (process %d); remove with: rm -rf %s\n",
				s.Dir, gib(s.Bytes), s.Final, s.PID, shellQuote(s.Dir))
		default:
			fmt.Fprintf(w, "  %s  %s, an unfinished install left by process %d; remove with: rm -rf %s\n", s.Dir, gib(s.Bytes), s.PID, shellQuote(s.Dir))
		}
	}
}

func widthSize(s Status, w int) string {
	if !slices.Contains(s.Entry.Widths, w) {
		return "-"
	}
	return estimate(s.Sizes.Install[w])
}

func installedList(s Status) string {
	var have []string
	for _, w := range slices.Sorted(mapKeys(s.Installed)) {
		have = append(have, fmt.Sprintf("%d-bit", w))
	}
	if len(have) == 0 {
		return "-"
	}
	return strings.Join(have, ", ")
}

func mapKeys(m map[int]Found) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func estimate(n int64) string {
	if n <= 0 {
		return "?"
	}
	return "~" + gib(n)
}

// gib formats n in GiB with enough precision for small sizes: every size
// nvmai prints is binary.
func gib(n int64) string {
	switch g := float64(n) / (1 << 30); {
	case g >= 100:
		return fmt.Sprintf("%.0f GiB", g)
	case g >= 0.1:
		return fmt.Sprintf("%.1f GiB", g)
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./+:-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// WriteResults prints one line per install on w (stdout): where it is and
// whether it was built or already there.
func WriteResults(w io.Writer, results []Result) {
	for _, r := range results {
		state, commit, tail := "installed and verified", "", ""
		if r.Reused {
			state, tail = "already installed and verified", "; pass --overwrite to rebuild it"
		}
		if r.Commit != "" {
			commit = fmt.Sprintf(" (commit %s)", shortCommit(r.Commit))
		}
		fmt.Fprintf(w, "%s: %d-bit %s%s%s\n", r.Dir, r.Width, state, commit, tail)
	}
}
