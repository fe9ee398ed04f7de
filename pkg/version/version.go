// Package version says which build of nvmai is running. Release builds set
// the two variables with -ldflags -X (scripts/release.sh); other builds are
// "devel", with the VCS revision Go embedded when there is one.
package version

import (
	"runtime/debug"
	"strings"
)

// Set at link time: go build -ldflags "-X github.com/nvmai/nvmai/pkg/version.Version=v1.2.3
// -X github.com/nvmai/nvmai/pkg/version.Commit=abcdef0".
var (
	Version = "devel"
	Commit  = ""
)

// String is the version and, when known, the commit: "v1.2.3 (abcdef0)",
// "devel (abcdef0)" or "devel".
func String() string {
	c := Commit
	if c == "" {
		c = vcsRevision()
	}
	if c == "" {
		return Version
	}
	return Version + " (" + c + ")"
}

func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return strings.TrimSpace(rev + dirty)
}
