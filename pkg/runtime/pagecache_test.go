package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropCached syncs each file and asks the kernel to evict its pages, so
// residency measured afterwards comes from reads made since.
func dropCached(t testing.TB, paths []string) {
	t.Helper()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			t.Fatalf("dropping %s from the page cache: %v", p, err)
		}
	}
}

// cachedBytes is how many bytes of the files sit in the page cache:
// mincore over a temporary read-only mapping of each (mapping does not
// fault pages in, so measuring does not change the answer).
func cachedBytes(t testing.TB, paths []string) int64 {
	t.Helper()
	page := int64(os.Getpagesize())
	var total int64
	for _, p := range paths {
		n, err := residentPages(p)
		if err != nil {
			t.Fatal(err)
		}
		total += n * page
	}
	return total
}

func residentPages(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unix.Munmap(data)
	page := int64(os.Getpagesize())
	vec := make([]byte, (st.Size()+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n, nil
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
