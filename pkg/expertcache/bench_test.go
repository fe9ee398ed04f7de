package expertcache

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// The read benchmarks use the 35B-A3B 4-bit expert record (H 2048, I 512:
// 1,769,472 bytes) and a layer's worth of misses per operation: 8 distinct
// random experts of 64, so about 1 in 8 hits.
//
//	go test -run '^$' -bench 'Read' -benchtime 200x ./pkg/expertcache/
const (
	benchLayers  = 2
	benchExperts = 64
	benchBatch   = 8
)

var benchInstall struct {
	once sync.Once
	dir  string
	m    *packexperts.Manifest
}

func benchSetup(b *testing.B) (string, *packexperts.Manifest) {
	benchInstall.once.Do(func() {
		dir, err := os.MkdirTemp("", "expertcache-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchInstall.dir = dir
		benchInstall.m = syntheticInstall(b, dir, benchLayers, benchExperts, benchBatch, 2048, 512)
	})
	if benchInstall.m == nil {
		b.Fatal("benchmark install setup failed")
	}
	dropFromPageCache(b, benchInstall.dir, benchInstall.m)
	return benchInstall.dir, benchInstall.m
}

// BenchmarkRead alternates, op by op, a batch of 8 random experts read
// through the cache and the same kind of batch read with bare preads of
// the same mode, and reports both rates and their ratio. Alternating
// matters here: this VM's disk drifts by ±30% between runs.
func BenchmarkRead(b *testing.B) {
	for _, mode := range []IOMode{IODirect, IODontCache, IODropBehind, IOBuffered} {
		for _, threads := range []int{1, 4} {
			b.Run(fmt.Sprintf("%v/threads=%d", mode, threads), func(b *testing.B) { benchRead(b, mode, threads) })
		}
	}
}

func benchRead(b *testing.B, mode IOMode, threads int) {
	dir, m := benchSetup(b)
	c, err := New(dir, m, Options{Slots: benchBatch, IOThreads: threads, IO: mode})
	if err != nil {
		b.Skipf("%v: %v", mode, err)
	}
	defer c.Close()
	raw := newRawReader(b, dir, m, mode, threads)
	defer raw.close()
	cacheIDs, rawIDs := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(3, 4))
	var rawBytes int64
	var cacheTime, rawTime time.Duration
	layer := 0
	for b.Loop() {
		ids := cacheIDs.Perm(benchExperts)[:benchBatch]
		start := time.Now()
		_, release, err := c.Acquire(layer, ids)
		if err != nil {
			b.Fatal(err)
		}
		release()
		cacheTime += time.Since(start)
		ids = rawIDs.Perm(benchExperts)[:benchBatch]
		start = time.Now()
		rawBytes += raw.read(b, layer, ids)
		rawTime += time.Since(start)
		layer = (layer + 1) % benchLayers
	}
	st := c.Stats()
	cacheRate := float64(st.BytesRead) / cacheTime.Seconds()
	rawRate := float64(rawBytes) / rawTime.Seconds()
	b.ReportMetric(cacheRate/1e6, "cache-MB/s")
	b.ReportMetric(rawRate/1e6, "raw-MB/s")
	b.ReportMetric(cacheRate/rawRate, "cache/raw")
	b.ReportMetric(100*st.HitRate(), "hit%")
}

// rawReader is the floor: the same reads with no cache around them, into
// as many aligned buffers as the cache has slots (the memory traffic must
// match: rewriting one small buffer stays in the CPU cache and is faster).
type rawReader struct {
	mode    IOMode
	stride  int64
	threads int
	fds     []int
	buf     []byte
}

func newRawReader(b *testing.B, dir string, m *packexperts.Manifest, mode IOMode, threads int) *rawReader {
	r := &rawReader{mode: mode, stride: m.Experts.Stride, threads: threads}
	for _, l := range m.Experts.Layers {
		fd, err := openLayer(filepath.Join(dir, l.File), mode)
		if err != nil {
			r.close()
			b.Skipf("%v: %v", mode, err)
		}
		r.fds = append(r.fds, fd)
	}
	buf, err := unix.Mmap(-1, 0, int(r.stride)*benchBatch*benchLayers, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		r.close()
		b.Fatal(err)
	}
	r.buf = buf
	return r
}

func (r *rawReader) read(b *testing.B, layer int, ids []int) int64 {
	work := make(chan int, len(ids))
	for i := range ids {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	errs := make([]error, r.threads)
	for w := range r.threads {
		wg.Go(func() {
			for i := range work {
				at := int64(layer*benchBatch+i) * r.stride
				if err := readFull(r.fds[layer], r.mode, r.buf[at:at+r.stride], int64(ids[i])*r.stride); err != nil {
					errs[w] = err
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return int64(len(ids)) * r.stride
}

func (r *rawReader) close() {
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	if r.buf != nil {
		unix.Munmap(r.buf)
	}
}

// BenchmarkReadModes alternates bare reads of each bounded mode op by op,
// to choose IOBounded's order on a target machine.
func BenchmarkReadModes(b *testing.B) {
	modes := []IOMode{IODirect, IODontCache, IODropBehind}
	for _, threads := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			dir, m := benchSetup(b)
			readers := make([]*rawReader, len(modes))
			for i, mode := range modes {
				readers[i] = newRawReader(b, dir, m, mode, threads)
				defer readers[i].close()
			}
			rng := rand.New(rand.NewPCG(9, 9))
			took := make([]time.Duration, len(modes))
			bytes := make([]int64, len(modes))
			layer := 0
			for b.Loop() {
				for i, r := range readers {
					ids := rng.Perm(benchExperts)[:benchBatch]
					start := time.Now()
					bytes[i] += r.read(b, layer, ids)
					took[i] += time.Since(start)
				}
				layer = (layer + 1) % benchLayers
			}
			for i, mode := range modes {
				b.ReportMetric(float64(bytes[i])/took[i].Seconds()/1e6, mode.String()+"-MB/s")
			}
		})
	}
}
