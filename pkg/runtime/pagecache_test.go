package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/pagecache"
)

// dropCached evicts the files from the page cache (see pagecache.Drop).
func dropCached(t testing.TB, paths []string) {
	t.Helper()
	if err := pagecache.Drop(paths); err != nil {
		t.Fatal(err)
	}
}

// cachedBytes is how many bytes of the files sit in the page cache.
func cachedBytes(t testing.TB, paths []string) int64 {
	t.Helper()
	n, err := pagecache.CachedAll(paths)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// procStatus reads the "<n> kB" fields of /proc/self/status (VmHWM,
// VmRSS, RssAnon, RssFile, …) as bytes.
func procStatus() (map[string]int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[name] = kb << 10
		}
	}
	return out, sc.Err()
}
