package gpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// slot_resolve and slot_fill against the Go reference (SlotRef), step for
// step on random routing with a hot set: the device's tables (slotOf,
// expertOf, lastUse, the step, the fill list), each pick's slot, the
// counters, and every slot's bytes; and expert_need and expert_stage on
// random prefill passes between the steps: every needed expert staged
// byte for byte, from its slot or the host, the tables untouched. Two
// steps in three are read ahead first, on the side stream forked and
// joined as the decode graph does: slot_prefetch on logits that favour the
// coming picks (with ties and NaNs), slot_fill_ahead (a grid of 3 blocks
// striding over the records), checked against the reference's prefetch:
// the read-ahead list, the stamps, the guess counters and the bytes. At k,
// 24 slots and E−1. At read-ahead distance 0 the side stream is joined
// whole (Join); at distance d ≥ 1 the read-ahead ends with a side mark and
// d other layers' steps (their own tables, pools and references) run on
// the stream before the wait for it (WaitMark), as the decode graph
// interleaves them (streamahead.go). The last steps run with the copies
// skipped (the bench's copy-wait flag): the tables as the reference's,
// the pool's bytes untouched.
func TestSlotKernelsMatchReference(t *testing.T) {
	needGPU(t)
	const E, k = 256, 8
	const stride = 3073 * 16 // several copy blocks a record, the last one short
	for _, S := range []int{k, 24, E - 1} {
		for _, dist := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("S=%d/dist=%d", S, dist), func(t *testing.T) {
				dev, err := cuda.Open(0)
				if err != nil {
					t.Fatal(err)
				}
				defer dev.Close()
				// Everything runs on the device goroutine: a mismatch is
				// returned as an error, never t.Fatal there.
				if err := dev.Do(func(c *cuda.Ctx) error { return slotKernelsCheck(c, E, S, k, stride, dist) }); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// slotLayer is one of the other layers that run between a read-ahead and
// its wait: its own table, pool and reference.
type slotLayer struct {
	pool, tab, stats, slotSel, sel cuda.DevicePtr
	ref                            *expertstream.SlotRef
}

func slotKernelsCheck(c *cuda.Ctx, E, S, k int, stride int64, dist int) error {
	ks, err := gpukernels.Load(c)
	if err != nil {
		return err
	}
	host, hostDev, err := c.HostAlloc(uint64(int64(E) * stride))
	if err != nil {
		return err
	}
	defer c.HostFree(host)
	for e := range E {
		rec := host[int64(e)*stride : int64(e+1)*stride]
		for j := range rec {
			rec[j] = byte(e*131 + j*7 + j>>9)
		}
	}
	words := gpukernels.SlotTableWords(E, S, k)
	const prefillT = 37
	var ptrs []cuda.DevicePtr
	defer func() {
		for _, p := range ptrs {
			c.Free(p)
		}
	}()
	alloc := func(n int64) (cuda.DevicePtr, error) {
		p, err := c.Alloc(uint64(n))
		if err == nil {
			ptrs = append(ptrs, p)
		}
		return p, err
	}
	if err := c.SideStream(); err != nil {
		return err
	}
	if err := c.SideMarks(1); err != nil {
		return err
	}
	var pool, tab, stats, slotSel, sel, staging, need, logits, skip cuda.DevicePtr
	others := make([]slotLayer, dist)
	allocs := []struct {
		p *cuda.DevicePtr
		n int64
	}{{&pool, int64(S) * stride}, {&tab, 4 * int64(words)}, {&stats, 8 * gpukernels.SlotStatsWords}, {&slotSel, 4 * int64(k)},
		{&sel, 4 * int64(k*prefillT)}, {&staging, int64(E) * stride}, {&need, 4 * int64(E)}, {&logits, 4 * int64(E)}, {&skip, 4}}
	for i := range others {
		o := &others[i]
		o.ref = expertstream.NewSlotRef(E, S)
		allocs = append(allocs, []struct {
			p *cuda.DevicePtr
			n int64
		}{{&o.pool, int64(S) * stride}, {&o.tab, 4 * int64(words)}, {&o.stats, 8 * gpukernels.SlotStatsWords}, {&o.slotSel, 4 * int64(k)}, {&o.sel, 4 * int64(k)}}...)
	}
	for _, a := range allocs {
		if *a.p, err = alloc(a.n); err != nil {
			return err
		}
	}
	type fill struct {
		p cuda.DevicePtr
		v uint32
		n int
	}
	fills := []fill{{tab, 0xffffffff, E + S}, {tab + cuda.DevicePtr(4*(E+S)), 0, words - E - S}, {stats, 0, 2 * gpukernels.SlotStatsWords}, {pool, 0, int(int64(S) * stride / 4)}, {skip, 0, 1}}
	for _, o := range others {
		fills = append(fills, fill{o.tab, 0xffffffff, E + S}, fill{o.tab + cuda.DevicePtr(4*(E+S)), 0, words - E - S}, fill{o.stats, 0, 2 * gpukernels.SlotStatsWords})
	}
	for _, m := range fills {
		if err := c.Memset32(m.p, m.v, uint64(m.n)); err != nil {
			return err
		}
	}
	l := &gpukernels.Launcher{C: c, K: ks}
	ref := expertstream.NewSlotRef(E, S)
	rng := rand.New(rand.NewPCG(1, uint64(S)))
	var wantStats [gpukernels.SlotStatsWords]uint64
	pick := func() int32 { // a hot set of 40 experts takes 70% of picks
		if rng.IntN(10) < 7 {
			return int32(rng.IntN(40))
		}
		return int32(rng.IntN(E))
	}
	readTab := func() ([]int32, error) {
		got := make([]int32, words)
		return got, c.DtoH(cuda.Bytes(got), tab)
	}
	picksOf := func() []int32 {
		var picks []int32
		for len(picks) < k {
			if e := pick(); !slices.Contains(picks, e) {
				picks = append(picks, e)
			}
		}
		return picks
	}
	// otherStep runs one step of the other layers on the stream (between a
	// read-ahead and its wait at distance ≥ 1).
	otherStep := func() error {
		for i := range others {
			o := &others[i]
			picks := picksOf()
			if err := c.HtoD(o.sel, cuda.Bytes(picks)); err != nil {
				return err
			}
			if err := l.SlotResolve(o.slotSel, o.tab, o.stats, o.sel, E, S, k, stride); err != nil {
				return err
			}
			if err := l.SlotFill(o.pool, hostDev, o.tab, E, S, k, stride, skip); err != nil {
				return err
			}
			o.ref.Resolve(picks)
		}
		return nil
	}
	const steps, skipFrom = 410, 401 // the last steps skip their copies
	var poolBeforeSkip []byte
	for step := 1; step <= steps; step++ {
		if step == skipFrom {
			poolBeforeSkip = make([]byte, int64(S)*stride)
			if err := c.DtoH(poolBeforeSkip, pool); err != nil {
				return err
			}
			if err := c.Memset32(skip, 1, 1); err != nil {
				return err
			}
		}
		picks := picksOf()
		if err := c.HtoD(sel, cuda.Bytes(picks)); err != nil {
			return err
		}
		if step%3 != 0 { // read ahead: logits that favour most of the picks
			lg := make([]float32, E)
			for e := range lg {
				lg[e] = float32(rng.IntN(8)) // ties
			}
			for _, e := range picks {
				if rng.IntN(4) != 0 {
					lg[e] = 10
				}
			}
			if step%7 == 0 {
				lg[rng.IntN(E)] = float32(math.NaN())
			}
			if err := c.HtoD(logits, cuda.Bytes(lg)); err != nil {
				return err
			}
			if err := c.Fork(); err != nil {
				return err
			}
			side := &gpukernels.Launcher{C: c.Side(), K: ks}
			if err := side.SlotPrefetch(tab, stats, logits, E, S, k, stride); err != nil {
				return err
			}
			if err := side.SlotFillAhead(pool, hostDev, tab, E, S, k, stride, 3, skip); err != nil {
				return err
			}
			if dist == 0 {
				if err := c.Join(); err != nil {
					return err
				}
			} else {
				if err := c.MarkSide(0); err != nil {
					return err
				}
				if err := otherStep(); err != nil {
					return err
				}
				if err := c.WaitMark(0); err != nil {
					return err
				}
			}
			guesses := ref.Prefetch(lg, k)
			gotTab, err := readTab()
			if err != nil {
				return err
			}
			wantTab := ref.Words(k)
			at := gpukernels.SlotAheadOffset(E, S, k)
			if !slices.Equal(gotTab[:E+2*S+1], wantTab[:E+2*S+1]) || !slices.Equal(gotTab[at:at+1+2*len(ref.Ahead)], wantTab[at:at+1+2*len(ref.Ahead)]) {
				return fmt.Errorf("step %d, guesses %v: the device's table after the read-ahead differs from the reference's: slots/stamps first at word %d, read-ahead list %v want %v",
					step, guesses, firstDiff(gotTab[:E+2*S+1], wantTab[:E+2*S+1]), gotTab[at:at+1+2*len(ref.Ahead)], wantTab[at:at+1+2*len(ref.Ahead)])
			}
		}
		if err := l.SlotResolve(slotSel, tab, stats, sel, E, S, k, stride); err != nil {
			return err
		}
		if err := l.SlotFill(pool, hostDev, tab, E, S, k, stride, skip); err != nil {
			return err
		}
		want := ref.Resolve(picks)
		got := make([]int32, k)
		if err := c.DtoH(cuda.Bytes(got), slotSel); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("step %d, picks %v: slots %v, the reference %v", step, picks, got, want)
		}
		gotTab, err := readTab()
		if err != nil {
			return err
		}
		wantTab := ref.Words(k)
		n := E + 2*S + 2 + 2*len(ref.Fill) // the fill lists past their counts are stale
		at := gpukernels.SlotAheadOffset(E, S, k)
		if !slices.Equal(gotTab[:n], wantTab[:n]) || !slices.Equal(gotTab[at:at+1+2*len(ref.Ahead)], wantTab[at:at+1+2*len(ref.Ahead)]) {
			return fmt.Errorf("step %d, picks %v: the device's table differs from the reference's: first at word %d (%d, want %d)",
				step, picks, firstDiff(gotTab[:n], wantTab[:n]), gotTab[firstDiff(gotTab[:n], wantTab[:n])], wantTab[firstDiff(gotTab[:n], wantTab[:n])])
		}
		if step%50 == 0 && step < skipFrom { // every slot holds its expert's bytes
			p := make([]byte, int64(S)*stride)
			if err := c.DtoH(p, pool); err != nil {
				return err
			}
			for s, e := range ref.ExpertOf {
				if e >= 0 && !bytes.Equal(p[int64(s)*stride:int64(s+1)*stride], host[int64(e)*stride:int64(e+1)*stride]) {
					return fmt.Errorf("step %d: slot %d does not hold expert %d's bytes", step, s, e)
				}
			}
		}
		if step%60 == 0 && step < skipFrom { // a prefill pass: stage, the tables untouched
			tokSel := make([]int32, prefillT*k)
			needed := map[int32]bool{}
			for i := range tokSel {
				tokSel[i] = pick()
				needed[tokSel[i]] = true
			}
			if err := c.HtoD(sel, cuda.Bytes(tokSel)); err != nil {
				return err
			}
			if err := c.Memset32(staging, 0, uint64(int64(E)*stride/4)); err != nil {
				return err
			}
			if err := l.ExpertNeed(need, sel, len(tokSel), E); err != nil {
				return err
			}
			if err := l.ExpertStage(staging, pool, hostDev, need, tab, stats, E, stride); err != nil {
				return err
			}
			st := make([]byte, int64(E)*stride)
			if err := c.DtoH(st, staging); err != nil {
				return err
			}
			for e := range needed {
				if !bytes.Equal(st[int64(e)*stride:int64(e+1)*stride], host[int64(e)*stride:int64(e+1)*stride]) {
					return fmt.Errorf("step %d: expert %d staged with the wrong bytes (slot %d)", step, e, ref.SlotOf[e])
				}
				if ref.SlotOf[e] >= 0 {
					wantStats[3]++
				} else {
					wantStats[4]++
					wantStats[5] += uint64(stride)
				}
			}
			after, err := readTab()
			if err != nil {
				return err
			}
			if !slices.Equal(after[:E+2*S+2], gotTab[:E+2*S+2]) {
				return fmt.Errorf("step %d: staging changed the slot tables", step)
			}
		}
	}
	p := make([]byte, int64(S)*stride)
	if err := c.DtoH(p, pool); err != nil {
		return err
	}
	if !bytes.Equal(p, poolBeforeSkip) {
		return fmt.Errorf("the steps with their copies skipped wrote the pool")
	}
	for i, o := range others { // the layers between: tables as their references
		gotTab := make([]int32, words)
		if err := c.DtoH(cuda.Bytes(gotTab), o.tab); err != nil {
			return err
		}
		if want := o.ref.Words(k); !slices.Equal(gotTab[:E+2*S+1], want[:E+2*S+1]) {
			return fmt.Errorf("layer %d between the read-ahead and its wait: its table differs from its reference at word %d", i, firstDiff(gotTab[:E+2*S+1], want[:E+2*S+1]))
		}
	}
	wantStats[0], wantStats[1], wantStats[2] = ref.Hits, ref.Misses, ref.Misses*uint64(stride)
	wantStats[6], wantStats[7], wantStats[8], wantStats[9], wantStats[10] = ref.Guesses, ref.Guessed, ref.AheadCopies, ref.AheadUsed, ref.AheadCopies*uint64(stride)
	gotStats := make([]uint64, gpukernels.SlotStatsWords)
	if err := c.DtoH(cuda.Bytes(gotStats), stats); err != nil {
		return err
	}
	if !slices.Equal(gotStats, wantStats[:]) {
		return fmt.Errorf("counters %v, want %v", gotStats, wantStats)
	}
	if ref.Hits == 0 || ref.Misses == 0 || ref.AheadUsed == 0 || ref.Guessed == ref.Guesses {
		return fmt.Errorf("the routing gave %d hits and %d misses, %d of %d guesses right, %d copies ahead used: the test exercises too little", ref.Hits, ref.Misses, ref.Guessed, ref.Guesses, ref.AheadUsed)
	}
	return nil
}

func firstDiff(a, b []int32) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return 0
}
