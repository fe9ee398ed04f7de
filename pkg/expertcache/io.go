package expertcache

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/pkg/limits"
)

// IOMode is how experts are read from their layer files.
type IOMode uint8

const (
	// IOBounded (the default) keeps the page cache out of the footprint: it
	// uses the first of IODirect, IODontCache, IODropBehind that works on the
	// install's file system.
	IOBounded IOMode = iota
	// IOBuffered is plain pread: the kernel keeps what was read in its page
	// cache, outside the budget (NVMAI_BOUNDED_IO=0).
	IOBuffered
	// IODontCache is preadv2 with RWF_DONTCACHE (Linux ≥ 6.14 and a file
	// system that supports it): buffered reads with kernel readahead whose
	// pages are dropped once copied out.
	IODontCache
	// IODirect is O_DIRECT: the disk writes into the slot; buffer, offset
	// and length are all multiples of limits.DirectIOAlign.
	IODirect
	// IODropBehind is pread followed by POSIX_FADV_DONTNEED on the range,
	// the fallback for file systems with neither of the above.
	IODropBehind
)

var ioModeNames = map[IOMode]string{IOBounded: "bounded", IOBuffered: "buffered", IODontCache: "dontcache", IODirect: "direct", IODropBehind: "dropbehind"}

func (m IOMode) String() string {
	if s, ok := ioModeNames[m]; ok {
		return s
	}
	return fmt.Sprintf("IOMode(%d)", uint8(m))
}

// Bounded reports whether the mode keeps the page cache from growing.
func (m IOMode) Bounded() bool { return m != IOBuffered }

// BoundedIOEnv is the environment variable BoundedIOFromEnv reads.
const BoundedIOEnv = "NVMAI_BOUNDED_IO"

// BoundedIOFromEnv reads NVMAI_BOUNDED_IO: unset, "1", "true" or "on" keep
// the default bounded reads; "0", "false" or "off" select IOBuffered.
func BoundedIOFromEnv() (IOMode, error) {
	v, ok := os.LookupEnv(BoundedIOEnv)
	if !ok {
		return IOBounded, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "1", "true", "on", "yes":
		return IOBounded, nil
	case "0", "false", "off", "no":
		return IOBuffered, nil
	}
	return IOBounded, fmt.Errorf("%s=%q: use 1 (bounded reads, the default) or 0 (page-cache reads)", BoundedIOEnv, v)
}

// boundedOrder is what IOBounded tries, fastest first. For expert-sized
// random reads (1.7 MiB, 8 per batch) O_DIRECT measured 1.1–1.5 GB/s on
// this project's VMs against 0.8–1.0 GB/s for RWF_DONTCACHE with readahead
// off (BenchmarkReadModes, interleaved). DONTCACHE's 3–3.9 GB/s in
// docs/cpu-kernels-and-io.md §1.2 is for 4 MiB reads where readahead helps;
// with readahead on, random reads leave readahead pages cached outside the
// budget, so it stays off (see openLayer).
var boundedOrder = []IOMode{IODirect, IODontCache, IODropBehind}

// unsupported reports errors that mean "this mode does not work here" rather
// than "this file is broken": unknown preadv2 flags give EINVAL (kernels
// before 6.14) or EOPNOTSUPP (file systems without DONTCACHE); O_DIRECT is
// refused with EINVAL.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// openLayer opens one expert file for mode.
func openLayer(path string, mode IOMode) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if mode == IODirect {
		flags |= unix.O_DIRECT
	}
	for {
		fd, err := unix.Open(path, flags, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		if mode == IODontCache || mode == IODropBehind {
			// Without readahead the kernel reads exactly the expert: the
			// pages readahead would add past it are never copied out, so
			// drop-behind would leave them cached, outside the budget.
			if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
				unix.Close(fd)
				return -1, &os.PathError{Op: "fadvise", Path: path, Err: err}
			}
		}
		return fd, nil
	}
}

// probe reads the first block of path with mode into scratch (aligned,
// limits.DirectIOAlign bytes), so an unsupported mode shows at open time
// instead of on the first miss.
func probe(path string, mode IOMode, scratch []byte) error {
	fd, err := openLayer(path, mode)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return readFull(fd, mode, scratch[:limits.DirectIOAlign], 0)
}

// chooseMode resolves IOBounded by probing path; other modes are probed too
// so a forced mode that cannot work fails in New with the reason.
func chooseMode(path string, want IOMode, scratch []byte) (IOMode, error) {
	if want != IOBounded {
		if err := probe(path, want, scratch); err != nil {
			return 0, fmt.Errorf("%s: %v reads do not work here: %w", path, want, err)
		}
		return want, nil
	}
	var reasons []string
	for _, m := range boundedOrder {
		err := probe(path, m, scratch)
		if err == nil {
			return m, nil
		}
		if !unsupported(err) {
			return 0, fmt.Errorf("%s: probing %v reads: %w", path, m, err)
		}
		reasons = append(reasons, fmt.Sprintf("%v: %v", m, err))
	}
	return 0, fmt.Errorf("%s: no bounded read mode works (%s); set %s=0 to use page-cache reads", path, strings.Join(reasons, "; "), BoundedIOEnv)
}

// readFull fills buf from fd at off, looping over short reads.
func readFull(fd int, mode IOMode, buf []byte, off int64) error {
	start, length := off, int64(len(buf))
	for len(buf) > 0 {
		var n int
		var err error
		if mode == IODontCache {
			n, err = unix.Preadv2(fd, [][]byte{buf}, off, unix.RWF_DONTCACHE)
		} else {
			n, err = unix.Pread(fd, buf, off)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		buf, off = buf[n:], off+int64(n)
	}
	if mode == IODropBehind {
		return unix.Fadvise(fd, start, length, unix.FADV_DONTNEED)
	}
	return nil
}

// readReq asks a reader to fill one slot of one layer.
type readReq struct {
	fd    int
	mode  IOMode
	buf   []byte
	off   int64
	layer int
	slot  int
	// spec marks a speculative read (Prefetch); it is skipped when a visit
	// after the one it was for has begun by the time a reader takes it.
	spec  bool
	warm  bool // a speculative read is a warm read (warm.go), not Prefetch's
	visit uint64
	done  chan<- readDone
}

type readDone struct {
	layer    int
	slot     int
	spec     bool
	warm     bool
	canceled bool // a speculative read skipped: the slot holds nothing
	end      time.Time
	err      error
}

// reader serves requests until either queue is closed, taking a demand
// read whenever one waits: speculative reads only use a disk that demand
// leaves idle. visits is the cache's count of visits begun.
func reader(demand, spec <-chan readReq, visits *atomic.Uint64) {
	for {
		var rq readReq
		var ok bool
		select {
		case rq, ok = <-demand:
		default:
			select {
			case rq, ok = <-demand:
			case rq, ok = <-spec:
			}
		}
		if !ok {
			return
		}
		d := readDone{layer: rq.layer, slot: rq.slot, spec: rq.spec, warm: rq.warm}
		if rq.spec && rq.visit < visits.Load() {
			d.canceled = true
		} else {
			d.err = readFull(rq.fd, rq.mode, rq.buf, rq.off)
		}
		d.end = time.Now()
		rq.done <- d
	}
}
