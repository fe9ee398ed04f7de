package version

import "testing"

func TestStringNamesVersionAndCommit(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	for _, tc := range []struct{ version, commit, want string }{
		{"v1.2.3", "abcdef0", "v1.2.3 (abcdef0)"},
		{"devel", "0123456789ab", "devel (0123456789ab)"},
	} {
		Version, Commit = tc.version, tc.commit
		if got := String(); got != tc.want {
			t.Errorf("String() with %q/%q = %q, want %q", tc.version, tc.commit, got, tc.want)
		}
	}
}
