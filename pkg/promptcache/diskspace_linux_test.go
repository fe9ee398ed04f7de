package promptcache

import (
	"os"
	"strings"
	"testing"
)

// D14: a directory on a virtual filesystem is refused, by name, before
// anything is created there.
func TestDiskRefusesVirtualFilesystems(t *testing.T) {
	for _, c := range []struct{ dir, want string }{
		{"/proc/self", "procfs"},
		{"/proc/self/fd", "procfs"},
		{"/proc/nvmai-missing/deep", "procfs"},
		{"/sys/kernel", "sysfs"},
		{"/dev", "devtmpfs"},
		{"/dev/nvmai-missing", "devtmpfs"},
		{"/dev/null", "devtmpfs"},
	} {
		if _, err := os.Stat(c.dir); err != nil && !strings.Contains(c.dir, "missing") {
			continue // not mounted here
		}
		if c.want == "devtmpfs" && !onDevFS("/dev") {
			continue // /dev is not a mount of its own here
		}
		d, err := OpenDisk(DiskOptions{Dir: c.dir, Budget: 1 << 20})
		if err == nil {
			d.Close()
			t.Errorf("%s: accepted", c.dir)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "virtual filesystem") {
			t.Errorf("%s: %v, want it to name %s", c.dir, err, c.want)
		}
	}
	if _, err := os.Stat("/dev/nvmai-missing"); err == nil {
		t.Error("/dev/nvmai-missing was created")
	}
}
