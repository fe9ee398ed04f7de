package blocks

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/model"
)

// filledKV is a cache of n random tokens of hkv heads of dh at bits, and
// the rows it was given.
func filledKV(bits, n, hkv, dh int, seed uint64) (*KVCache, [][2][]float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	c := NewKVCache(bits, n, hkv, dh)
	rows := make([][2][]float32, n)
	for p := range rows {
		for i := range rows[p] {
			rows[p][i] = make([]float32, hkv*dh)
			for j := range rows[p][i] {
				rows[p][i][j] = float32(rng.NormFloat64() * float64(1+p%5))
			}
		}
		c.PutKV(p, rows[p][0], rows[p][1])
	}
	return c, rows
}

// TestKVCacheCopyHeadRows: a head's rows gathered from a cache of several
// heads (runs of positions, in the stored width) are bitwise the cache a
// one-head cache makes of that head's slices: int8 groups never cross
// heads, so nothing is rounded again. Heads of 32 (the group is the head),
// 128 and 256 (groups of 64), every width.
func TestKVCacheCopyHeadRows(t *testing.T) {
	runs := [][2]int{{4, 8}, {8, 12}, {20, 24}, {37, 40}}
	for _, dh := range []int{32, 128, 256} {
		for _, bits := range []int{model.KVFloat32, model.KVBF16, model.KVInt8} {
			t.Run(fmt.Sprintf("dh%d/kv%d", dh, bits), func(t *testing.T) {
				src, rows := filledKV(bits, 40, 2, dh, uint64(dh+bits))
				for g := range 2 {
					got := NewKVCache(bits, 16, 1, dh)
					want := NewKVCache(bits, 16, 1, dh)
					at := 0
					for _, r := range runs {
						src.CopyHeadRows(got, g, at, r[0], r[1])
						for p := r[0]; p < r[1]; p++ {
							want.PutKV(at+p-r[0], rows[p][0][g*dh:(g+1)*dh], rows[p][1][g*dh:(g+1)*dh])
						}
						at += r[1] - r[0]
					}
					if !got.SamePrefix(want, at) {
						t.Fatalf("head %d: the gathered rows differ from the head's own", g)
					}
				}
			})
		}
	}
}

// TestKVCacheRowsRoundTrip: WriteRows then ReadRows restores the written
// tokens bitwise at every width, and Resized keeps them.
func TestKVCacheRowsRoundTrip(t *testing.T) {
	for _, bits := range []int{model.KVFloat32, model.KVBF16, model.KVInt8} {
		src, _ := filledKV(bits, 9, 2, 128, 3)
		var buf bytes.Buffer
		cw := lecodec.NewWriter(&buf)
		src.WriteRows(cw, 7)
		cw.Flush()
		if cw.Err != nil {
			t.Fatal(cw.Err)
		}
		if want := 7 * KVBytesPerToken(bits, 256, 128); int64(buf.Len()) != want {
			t.Errorf("kv%d: %d bytes for 7 tokens, want %d", bits, buf.Len(), want)
		}
		dst := NewKVCache(bits, 7, 2, 128)
		cr := lecodec.NewReader(&buf)
		dst.ReadRows(cr, 7)
		if cr.Err != nil || !dst.SamePrefix(src, 7) {
			t.Errorf("kv%d: round trip lost the rows (%v)", bits, cr.Err)
		}
		if g := src.Resized(20, 9); g.Capacity() != 20 || !g.SamePrefix(src, 9) {
			t.Errorf("kv%d: Resized to %d tokens lost the rows", bits, g.Capacity())
		}
	}
}

// TestKVCapacityGrowth: capacities double from the current one up to the
// max context, and the previous capacity is what the last doubling from
// DefaultKVInitial leaves.
func TestKVCapacityGrowth(t *testing.T) {
	for _, c := range []struct{ cur, need, maxContext, want int }{
		{8192, 8193, 262144, 16384}, {2, 3, 100, 4}, {2, 40, 100, 64}, {64, 90, 100, 100}, {0, 1, 10, 1}, {8, 5, 10, 8},
	} {
		if got := GrownKVCapacity(c.cur, c.need, c.maxContext); got != c.want {
			t.Errorf("GrownKVCapacity(%d, %d, %d) = %d, want %d", c.cur, c.need, c.maxContext, got, c.want)
		}
	}
	for ctx, want := range map[int]int{4096: 0, 8192: 0, 8193: 8192, 32768: 16384, 262144: 131072, 200000: 131072} {
		if got := PreviousKVCapacity(ctx); got != want {
			t.Errorf("PreviousKVCapacity(%d) = %d, want %d", ctx, got, want)
		}
	}
}
