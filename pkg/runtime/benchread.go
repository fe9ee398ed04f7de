package runtime

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// weightMemoryPasses is how many rounds WeightMemoryRates alternates over.
const weightMemoryPasses = 10

// WeightMemoryRates is a plain read of the very memory a decode step reads,
// as one step reads it: each pass sums the hot resident weights and, per
// MoE layer, top-k slots picked at random among the filled ones, on 1 …
// threads goroutines (alternating), and returns each thread count's median
// and best rate in bytes/s over weightMemoryPasses passes.
//
// On a virtual machine this is the like-for-like ceiling for decode: the
// host's page tables for a 19 GiB working set do not stay cached as a
// 512 MiB buffer's do, and on the dev VM a plain read of 16 GiB ran ~15%
// below one of 512 MiB. MemReadRates (a fresh buffer) is reported beside it.
func (e *Engine) WeightMemoryRates(threads int) (med, best map[int]float64) {
	var layers [][][]byte
	if e.cache != nil {
		layers = e.cache.FilledSlots()
	}
	topK := 0
	if x := e.Install.Manifest.Experts; x != nil {
		topK = x.TopK
	}
	rng := rand.New(rand.NewPCG(3, 4))
	return readRates(weightMemoryPasses, threads, func() [][]byte {
		spans := [][]byte{e.Install.HotResident()}
		for _, slots := range layers {
			for _, i := range rng.Perm(len(slots))[:min(topK, len(slots))] {
				spans = append(spans, slots[i])
			}
		}
		return spans
	})
}

// readRates times passes rounds of summing the spans pick returns (called
// once per round), on 1 … threads goroutines in turn, and returns each
// thread count's median and best rate in bytes/s.
func readRates(passes, threads int, pick func() [][]byte) (med, best map[int]float64) {
	med, best = map[int]float64{}, map[int]float64{}
	rates := map[int][]float64{}
	var sink uint64
	for range passes {
		spans := pick()
		total := 0
		for _, s := range spans {
			total += len(s) &^ 7
		}
		if total == 0 {
			return med, best
		}
		for t := 1; t <= threads; t++ {
			t0 := time.Now()
			sink += sumSpans(spans, total, t)
			rates[t] = append(rates[t], float64(total)/time.Since(t0).Seconds())
		}
	}
	for t, r := range rates {
		med[t], best[t] = median(r), slices.Max(r)
	}
	if sink == 1 { // keep the sums observable so the reads are not optimised away
		fmt.Fprint(io.Discard, sink)
	}
	return med, best
}

// sumSpans sums the whole 8-byte words of spans (total bytes of them) on
// threads goroutines, each taking a contiguous share of the bytes.
func sumSpans(spans [][]byte, total, threads int) uint64 {
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	for g := range threads {
		lo, hi := total*g/threads&^7, total*(g+1)/threads&^7
		if g == threads-1 {
			hi = total
		}
		wg.Go(func() { sums[g] = sumRange(spans, lo, hi) })
	}
	wg.Wait()
	var s uint64
	for _, v := range sums {
		s += v
	}
	return s
}

// sumRange sums bytes [lo, hi) of the concatenation of spans' whole words.
func sumRange(spans [][]byte, lo, hi int) uint64 {
	var s uint64
	at := 0
	for _, span := range spans {
		n := len(span) &^ 7
		a, b := max(lo-at, 0), min(hi-at, n)
		if a < b {
			words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(span[a:]))), (b-a)/8)
			s += kernels.SumWords(words) // four words at a time; the tail below
			for _, w := range words[len(words)&^3:] {
				s += w
			}
		}
		at += n
		if at >= hi {
			break
		}
	}
	return s
}
