// Command footprint is the measuring side of scripts/footprint.sh and
// scripts/ioread.sh: page-cache residency of files (mincore), dropping
// files from the page cache, an install's footprint terms, the disk's raw
// O_DIRECT read rate in expert-sized requests, and a process's peak
// anonymous and file-backed RSS. It is a measurement tool, not one of the
// product's commands.
//
//	footprint info DIR                      install terms as shell assignments
//	footprint cached FILE...                bytes of the files in the page cache
//	footprint drop FILE...                  fsync, then POSIX_FADV_DONTNEED
//	footprint directread [flags] FILE...    O_DIRECT read rate, random requests
//	footprint watch -out F -- CMD ARGS...   run CMD, record its RSS peaks in F
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/pagecache"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

const usage = `usage:
  footprint info [-kv-tokens N] DIR
  footprint cached FILE...
  footprint drop FILE...
  footprint directread [-size BYTES] [-inflight N] [-limit BYTES] [-seed N] FILE...
  footprint watch -out FILE [-every DURATION] -- COMMAND ARGS...`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	args := os.Args[2:]
	var err error
	switch os.Args[1] {
	case "info":
		err = info(args)
	case "cached":
		err = cached(args)
	case "drop":
		err = pagecache.Drop(args)
	case "directread":
		err = directRead(args)
	case "watch":
		err = watch(args)
	default:
		err = fmt.Errorf("unknown subcommand %q; run it without arguments for the usage", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "footprint:", err)
	os.Exit(2)
}

// info prints the terms of the footprint formula for the install in DIR as
// shell assignments: resident.bin's size, the expert layout and the bytes
// of sequence state a session allocates (KV for kv-tokens tokens, the
// default KV capacity of nvmai-run, plus the Gated DeltaNet state).
func info(args []string) error {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	kvTokens := fs.Int("kv-tokens", qwen35.DefaultKVInitial, "KV capacity in tokens (nvmai-run --kv-initial)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("info takes one install directory")
	}
	dir := fs.Arg(0)
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		return err
	}
	if m.Experts == nil {
		return fmt.Errorf("%s has no routed experts; the footprint scripts measure MoE installs", dir)
	}
	st, err := os.Stat(filepath.Join(dir, packexperts.ResidentFile))
	if err != nil {
		return err
	}
	kv, err := stateBytes(m, *kvTokens)
	if err != nil {
		return err
	}
	x := m.Experts
	var files []string
	for _, l := range x.Layers {
		files = append(files, filepath.Join(dir, filepath.FromSlash(l.File)))
	}
	fmt.Printf("resident_bytes=%d\nkv_bytes=%d\nexpert_stride=%d\nexpert_count=%d\nexpert_layers=%d\ntop_k=%d\nexpert_bytes=%d\nexpert_files=%q\n",
		st.Size(), kv, x.Stride, x.Count, len(x.Layers), x.TopK, int64(len(x.Layers))*int64(x.Count)*x.Stride, strings.Join(files, " "))
	return nil
}

// stateBytes is what qwen35.NewState allocates: K and V of every
// full-attention layer for min(kvTokens, max context) tokens, and the conv
// window and recurrent matrix of every Gated DeltaNet layer, in float32.
func stateBytes(m *packexperts.Manifest, kvTokens int) (int64, error) {
	c, err := qwen35.ConfigFromGeometry(m.Architecture, m.Geometry)
	if err != nil {
		return 0, err
	}
	return c.StateBytes(kvTokens), nil
}

func cached(paths []string) error {
	total, err := pagecache.CachedAll(paths)
	if err != nil {
		return err
	}
	fmt.Println(total)
	return nil
}

// directRead reads the files in size-byte requests at offsets that are
// multiples of size, in a random order across all files, with inflight
// requests outstanding, through O_DIRECT: the access pattern of the expert
// cache's readers on misses, without any model around it.
func directRead(args []string) error {
	fs := flag.NewFlagSet("directread", flag.ContinueOnError)
	size := fs.Int64("size", 1<<20, "bytes per request (the expert stride); a multiple of 4096")
	inflight := fs.Int("inflight", 4, "requests outstanding (nvmai-run --io-threads)")
	limit := fs.Int64("limit", 0, "stop after this many bytes; 0 reads every request once")
	seed := fs.Uint64("seed", 1, "shuffle seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size <= 0 || *size%4096 != 0 || *inflight < 1 || fs.NArg() == 0 {
		return errors.New("directread needs files, -size a positive multiple of 4096 and -inflight ≥ 1")
	}
	type request struct {
		fd  int
		off int64
	}
	var reqs []request
	for _, p := range fs.Args() {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s with O_DIRECT: %w", p, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		for off := int64(0); off+*size <= st.Size; off += *size {
			reqs = append(reqs, request{fd, off})
		}
	}
	rng := rand.New(rand.NewPCG(*seed, 0))
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	if *limit > 0 && int64(len(reqs)) > *limit / *size {
		reqs = reqs[:max(1, *limit / *size)]
	}
	if len(reqs) == 0 {
		return fmt.Errorf("the files hold no whole %d-byte request", *size)
	}
	work := make(chan request)
	errs := make(chan error, *inflight)
	var wg sync.WaitGroup
	start := time.Now()
	for range *inflight {
		buf, err := unix.Mmap(-1, 0, int(*size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rq := range work {
				if err := preadFull(rq.fd, buf, rq.off); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, rq := range reqs {
		work <- rq
	}
	close(work)
	wg.Wait()
	secs := time.Since(start).Seconds()
	select {
	case err := <-errs:
		return err
	default:
	}
	bytes := int64(len(reqs)) * *size
	fmt.Printf("bytes=%d seconds=%.3f rate=%.0f\n", bytes, secs, float64(bytes)/secs)
	return nil
}

func preadFull(fd int, buf []byte, off int64) error {
	for len(buf) > 0 {
		n, err := unix.Pread(fd, buf, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("pread at %d: %w", off, err)
		case n == 0:
			return fmt.Errorf("pread at %d: unexpected end of file", off)
		}
		buf, off = buf[n:], off+int64(n)
	}
	return nil
}

// watch runs a command with the terminal's stdio, samples /proc/PID/status
// every interval, and writes the largest RssAnon and RssFile seen and the
// kernel's exact peak RSS (rusage maxrss, = VmHWM) to -out as JSON.
func watch(args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	out := fs.String("out", "", "JSON file to write the peaks to")
	every := fs.Duration("every", 20*time.Millisecond, "sampling interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return errors.New("watch needs -out FILE and a command after --")
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	peaks := map[string]int64{}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	var runErr error
loop:
	for {
		select {
		case runErr = <-done:
			break loop
		case <-tick.C:
			sample(status, peaks)
		}
	}
	result := map[string]int64{"max_rss_anon": peaks["RssAnon"], "max_rss_file": peaks["RssFile"]}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		result["maxrss"] = ru.Maxrss << 10
	}
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), runErr)
	}
	return nil
}

// sample raises peaks[field] to the "<n> kB" values in a status file; a
// process that already exited leaves them as they are.
func sample(path string, peaks map[string]int64) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil && kb<<10 > peaks[name] {
			peaks[name] = kb << 10
		}
	}
}
