// Command readlatency measures what a decode step's expert reads see: one
// expert record at a time (queue depth 1, as when a layer's single miss is
// known only after its router), direct I/O, at random experts of an
// install's expert files: first the experts' first reads in this run, then
// the same experts again (whatever caches lie below the file system, such
// as a VM host's, then hold them). It prints GB/s and milliseconds per
// read for both, the figures docs/performance.md bounds streamed decode
// with.
//
//	go run ./scripts/internal/readlatency -model DIR [-reads 150] [-seed 1]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	dir := flag.String("model", "", "install `DIR` (its manifest.json and experts/)")
	reads := flag.Int("reads", 150, "expert records to read")
	seed := flag.Uint64("seed", 1, "seed of the random experts")
	flag.Parse()
	if err := run(*dir, *reads, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "readlatency:", err)
		os.Exit(1)
	}
}

func run(dir string, reads int, seed uint64) error {
	if dir == "" || reads < 1 {
		return fmt.Errorf("usage: readlatency -model DIR [-reads N] [-seed S]")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return err
	}
	var m struct {
		Experts struct {
			Stride int64 `json:"stride"`
			Count  int64 `json:"count"`
		} `json:"experts"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "experts", "layer-*.bin"))
	if len(files) == 0 || m.Experts.Stride <= 0 || m.Experts.Count <= 0 {
		return fmt.Errorf("%s: no expert files or no expert stride in the manifest", dir)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		if fds[i], err = unix.Open(f, unix.O_RDONLY|unix.O_DIRECT, 0); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		defer unix.Close(fds[i])
	}
	buf, err := unix.Mmap(-1, 0, int(m.Experts.Stride), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	type at struct{ fd, off int64 }
	picks := make([]at, reads)
	for i := range picks {
		picks[i] = at{int64(fds[rng.IntN(len(fds))]), rng.Int64N(m.Experts.Count) * m.Experts.Stride}
	}
	pass := func(name string) error {
		t0 := time.Now()
		for _, p := range picks {
			if _, err := unix.Pread(int(p.fd), buf, p.off); err != nil {
				return err
			}
		}
		dt := time.Since(t0)
		fmt.Printf("%-26s %6.2f GB/s  %5.2f ms per %.2f MiB expert (%d reads, queue depth 1, direct I/O)\n", name,
			float64(int64(reads)*m.Experts.Stride)/dt.Seconds()/1e9, dt.Seconds()*1e3/float64(reads), float64(m.Experts.Stride)/(1<<20), reads)
		return nil
	}
	if err := pass("first reads in this run:"); err != nil {
		return err
	}
	return pass("the same experts again:")
}
