package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestAllocAlignedZeroedWritable(t *testing.T) {
	for _, size := range []int{1, 4096, PageSize - 1, PageSize, 3*PageSize + 17} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			r, err := Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := r.Free(); err != nil {
					t.Fatal(err)
				}
			}()
			if len(r.Bytes) != size || cap(r.Bytes) != size {
				t.Fatalf("len %d cap %d, want %d", len(r.Bytes), cap(r.Bytes), size)
			}
			if a := addressOf(r.Bytes) % PageSize; a != 0 && !Disabled() {
				t.Fatalf("address is %d bytes past a %d boundary", a, PageSize)
			}
			for i := range r.Bytes {
				if r.Bytes[i] != 0 {
					t.Fatalf("byte %d is %d, want 0", i, r.Bytes[i])
				}
				r.Bytes[i] = byte(i)
			}
		})
	}
}

func TestAllocZeroAndFreeTwice(t *testing.T) {
	r, err := Alloc(0)
	if err != nil || len(r.Bytes) != 0 {
		t.Fatalf("Alloc(0) = %v, %v", r, err)
	}
	r, err = Alloc(PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Free(); err != nil {
		t.Fatal(err)
	}
	if err := r.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
}

// TestHugePagesBackTheRegion logs (does not require) whether the kernel
// backed a touched region with huge pages: that depends on its THP setting.
func TestHugePagesBackTheRegion(t *testing.T) {
	r, err := Alloc(4 * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	for i := 0; i < len(r.Bytes); i += 4096 {
		r.Bytes[i] = 1
	}
	kb, err := anonHugeKB(addressOf(r.Bytes))
	if err != nil {
		t.Skip(err)
	}
	mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	t.Logf("THP %q: %d KiB of the 8192 KiB region in huge pages", strings.TrimSpace(string(mode)), kb)
}

// anonHugeKB reads AnonHugePages of the mapping holding addr from smaps.
func anonHugeKB(addr uintptr) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok && in {
			return strconv.Atoi(strings.Fields(v)[0])
		}
	}
	return 0, fmt.Errorf("no smaps entry holds %#x", addr)
}
