// Command touchrate measures how fast this machine backs memory a process
// touches for the first time, against touching it again: the cost the
// expert readers pay when a cold run's first pread fills fresh slot memory
// (docs/prefill.md, "Cold runs"). Each size is mapped, written one byte per
// 4 KiB page, written again, and unmapped; -huge maps it as the slots are
// (internal/hugemem, MADV_HUGEPAGE).
//
//	go run ./scripts/internal/touchrate -gib 4 -rounds 2
//	go run ./scripts/internal/touchrate -gib 4 -rounds 2 -huge
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nvmai/nvmai/internal/hugemem"
	"golang.org/x/sys/unix"
)

func main() {
	gib := flag.Int("gib", 4, "GiB to map and touch per round")
	rounds := flag.Int("rounds", 2, "rounds, each a new mapping")
	huge := flag.Bool("huge", false, "map as the expert slots are (transparent huge pages advised)")
	flag.Parse()
	for r := 1; r <= *rounds; r++ {
		if err := round(r, *gib<<30, *huge); err != nil {
			fmt.Fprintln(os.Stderr, "touchrate:", err)
			os.Exit(1)
		}
	}
}

func round(r, size int, huge bool) error {
	mem, free, err := mapping(size, huge)
	if err != nil {
		return err
	}
	defer free()
	first := touch(mem)
	again := touch(mem)
	gib := float64(size) / (1 << 30)
	fmt.Printf("round %d, %.0f GiB, huge=%v: first touch %.2f s (%.2f GiB/s), again %.3f s (%.1f GiB/s)\n",
		r, gib, huge, first.Seconds(), gib/first.Seconds(), again.Seconds(), gib/again.Seconds())
	return nil
}

func mapping(size int, huge bool) ([]byte, func(), error) {
	if huge {
		reg, err := hugemem.Alloc(size)
		if err != nil {
			return nil, nil, err
		}
		return reg.Bytes, func() { reg.Free() }, nil
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return mem, func() { unix.Munmap(mem) }, nil
}

func touch(mem []byte) time.Duration {
	start := time.Now()
	for i := 0; i < len(mem); i += 4096 {
		mem[i]++
	}
	return time.Since(start)
}
