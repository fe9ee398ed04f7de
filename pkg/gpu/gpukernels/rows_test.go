package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// The batched decode step's mixer launches (gdn_conv_rows,
// gdn_rec_reg_rows) give each row, outputs and its own state, the bits of
// the one-token launch on that row alone, for 1, 3 and 16 rows (the rows'
// states scattered, the a and b rows interleaved as the ab product lays
// them), geometries with partial column blocks and Dk < 128 included.
func TestMixerRowsBitwiseOneTokenLaunches(t *testing.T) {
	shapes := []GDNShape{
		{Hk: 2, Hv: 4, Dk: 128, Dv: 128},
		{Hk: 1, Hv: 2, Dk: 64, Dv: 96},
		{Hk: 1, Hv: 3, Dk: 96, Dv: 33},
	}
	r := rand.New(rand.NewPCG(23, 24))
	for _, s := range shapes {
		s.C = 2*s.Hk*s.Dk + s.Hv*s.Dv
		for _, N := range []int{1, 3, MaxRows} {
			for _, K := range []int{4, 3} {
				what := fmt.Sprintf("Dk %d Dv %d Hk %d Hv %d, %d rows, %d taps", s.Dk, s.Dv, s.Hk, s.Hv, N, K)
				proj := randVec(r, N*s.C, 1)
				w := randVec(r, s.C*K, 1)
				abStride := 2 * s.Hv
				ab := randVec(r, N*abStride, 1)
				negExpA := make([]float32, s.Hv)
				for i := range negExpA {
					negExpA[i] = -float32(math.Exp(r.NormFloat64() * 0.5))
				}
				dtBias := randVec(r, s.Hv, 0.5)
				convStates := make([][]float32, N)
				recStates := make([][]float32, N)
				for i := range N {
					convStates[i] = randVec(r, (K-1)*s.C, 1)
					recStates[i] = randVec(r, s.Hv*s.Dk*s.Dv, 0.1)
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					l.GDNPipe, l.GDNPar, l.GDNReg = true, true, true
					dproj, dw, dab := b.up(cuda.Bytes(proj)), b.up(cuda.Bytes(w)), b.up(cuda.Bytes(ab))
					dn, dd := b.up(cuda.Bytes(negExpA)), b.up(cuda.Bytes(dtBias))
					da, db := dab, dab+cuda.DevicePtr(4*s.Hv)
					run := func(rows bool) (conv, o []float32, cs, rs [][]float32) {
						convS, recS := make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N)
						for i := range N {
							convS[i], recS[i] = b.up(cuda.Bytes(convStates[i])), b.up(cuda.Bytes(recStates[i]))
						}
						dconv := b.poisoned(4 * N * s.C)
						do := b.poisoned(4 * N * s.Hv * s.Dv)
						row := func(p cuda.DevicePtr, i, width int) cuda.DevicePtr { return p + cuda.DevicePtr(4*i*width) }
						if rows {
							if err := l.GDNConvRows(dconv, dproj, convS, dw, s.C, K); err != nil {
								t.Fatal(err)
							}
							ok, err := l.GDNRecRows(do, recS, dconv, da, db, dn, dd, s, abStride)
							if err != nil || !ok {
								t.Fatalf("%s: GDNRecRows ran %v: %v", what, ok, err)
							}
						} else {
							for i := range N {
								if err := l.GDNConv(row(dconv, i, s.C), row(dproj, i, s.C), convS[i], dw, s.C, K, 1); err != nil {
									t.Fatal(err)
								}
							}
							for i := range N {
								if err := l.GDNRec(row(do, i, s.Hv*s.Dv), recS[i], row(dconv, i, s.C), row(da, i, abStride), row(db, i, abStride), dn, dd, s, 1, abStride); err != nil {
									t.Fatal(err)
								}
							}
						}
						if err := b.c.Sync(); err != nil {
							t.Fatal(err)
						}
						for i := range N {
							cs = append(cs, b.f32(convS[i], (K-1)*s.C))
							rs = append(rs, b.f32(recS[i], s.Hv*s.Dk*s.Dv))
						}
						return b.f32(dconv, N*s.C), b.f32(do, N*s.Hv*s.Dv), cs, rs
					}
					for _, mma2 := range mma2Variants(t) { // the one-token launches through gdn_conv_seq, then gdn_conv
						setMMA2(l, mma2)
						wc, wo, wcs, wrs := run(false)
						gc, gout, gcs, grs := run(true)
						if !slices.Equal(cuda.Bytes(gc), cuda.Bytes(wc)) {
							t.Errorf("%s MMA2 %v: gdn_conv_rows' outputs differ from gdn_conv's row by row", what, mma2)
						}
						if !slices.Equal(cuda.Bytes(gout), cuda.Bytes(wo)) {
							t.Errorf("%s: gdn_rec_reg_rows' outputs differ from gdn_rec's row by row", what)
						}
						for i := range N {
							if !slices.Equal(cuda.Bytes(gcs[i]), cuda.Bytes(wcs[i])) {
								t.Errorf("%s: row %d's conv state differs", what, i)
							}
							if !slices.Equal(cuda.Bytes(grs[i]), cuda.Bytes(wrs[i])) {
								t.Errorf("%s: row %d's delta-rule state differs", what, i)
							}
						}
					}
				})
			}
		}
	}
}

// rowPtrs refuses no rows and more than MaxRows (host only).
func TestRowPtrsBounds(t *testing.T) {
	for _, n := range []int{0, MaxRows + 1} {
		if _, err := rowPtrs(make([]cuda.DevicePtr, n)); err == nil {
			t.Errorf("%d rows: no error", n)
		}
	}
	tab, err := rowPtrs([]cuda.DevicePtr{7, 9})
	if err != nil || len(tab) != 8*MaxRows || tab[0] != 7 || tab[8] != 9 {
		t.Errorf("table %v, %v", tab, err)
	}
}

// The batched step's attention launches (attn_kv_*_rows,
// attn_scores_*_rows, attn_values_*_rows) give each row, its output and
// its cache, the bits of AttnKV and AttnHeads with T = 1 on that row
// alone: int8 and bfloat16 caches, heads of 256, 128 and 32, 1, 3 and 16
// rows each at its own position and capacity.
func TestAttnRowsBitwiseOneTokenLaunches(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, s := range attnShapes {
		kvd, qd := s.Hkv*s.Dh, s.Hq*s.Dh
		for _, bits := range []int{8, 16} {
			for _, N := range []int{1, 3, MaxRows} {
				what := fmt.Sprintf("Hq %d Hkv %d Dh %d, %d-bit cache, %d rows", s.Hq, s.Hkv, s.Dh, bits, N)
				caps, pos := make([]int, N), make([]int, N)
				for i := range N {
					caps[i] = 8 + r.IntN(40)
					pos[i] = r.IntN(caps[i]) // the new token's position; the rows before it are filled
				}
				kNorm, qNorm := randVec(r, s.Dh, 1), randVec(r, s.Dh, 1)
				invFreq := make([]float32, s.Half)
				for j := range invFreq {
					invFreq[j] = float32(math.Pow(10000, -float64(2*j)/float64(2*s.Half)))
				}
				k, v, q2 := randVec(r, N*kvd, 1), randVec(r, N*kvd, 1), randVec(r, N*2*qd, 1)
				prior := make([][2][]float32, N)
				for i := range N {
					prior[i] = [2][]float32{randVec(r, max(pos[i], 1)*kvd, 1), randVec(r, max(pos[i], 1)*kvd, 1)}
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					dkN, dqN, dinv := b.up(cuda.Bytes(kNorm)), b.up(cuda.Bytes(qNorm)), b.up(cuda.Bytes(invFreq))
					dk, dv, dq2 := b.up(cuda.Bytes(k)), b.up(cuda.Bytes(v)), b.up(cuda.Bytes(q2))
					zero := b.up(cuda.Bytes([]int32{0}))
					// makeRows fills each row's cache with its prior tokens.
					makeRows := func() []AttnRow {
						rows := make([]AttnRow, N)
						for i := range N {
							kv := devKV(b, bits, caps[i], kvd, s.Dh)
							if pos[i] > 0 {
								if err := l.AttnKV(kv, b.up(cuda.Bytes(prior[i][0])), b.up(cuda.Bytes(prior[i][1])), dkN, dinv, zero, s, 1e-6, pos[i]); err != nil {
									t.Fatal(err)
								}
							}
							rows[i] = AttnRow{KV: kv, Pos: b.up(cuda.Bytes([]int32{int32(pos[i])})), Scores: b.poisoned(4 * s.Hq * caps[i]), Capacity: caps[i]}
						}
						return rows
					}
					row := func(p cuda.DevicePtr, i, width int) cuda.DevicePtr { return p + cuda.DevicePtr(4*i*width) }
					alone, together := makeRows(), makeRows()
					oAlone, oTogether := b.poisoned(4*N*qd), b.poisoned(4*N*qd)
					for i, ar := range alone {
						if err := l.AttnKV(ar.KV, row(dk, i, kvd), row(dv, i, kvd), dkN, dinv, ar.Pos, s, 1e-6, 1); err != nil {
							t.Fatal(err)
						}
						if err := l.AttnHeads(row(oAlone, i, qd), ar.Scores, row(dq2, i, 2*qd), ar.KV, dqN, dinv, ar.Pos, s, 1e-6, ar.Capacity, 1); err != nil {
							t.Fatal(err)
						}
					}
					if !AttnRowsFit(together) {
						t.Fatalf("%s: AttnRowsFit is false", what)
					}
					if err := l.AttnKVRows(dk, dv, dkN, dinv, together, s, 1e-6); err != nil {
						t.Fatal(err)
					}
					if err := l.AttnHeadsRows(oTogether, dq2, dqN, dinv, together, s, 1e-6); err != nil {
						t.Fatal(err)
					}
					if err := b.c.Sync(); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(cuda.Bytes(b.f32(oTogether, N*qd)), cuda.Bytes(b.f32(oAlone, N*qd))) {
						t.Errorf("%s: the outputs differ from AttnHeads row by row", what)
					}
					for i := range N {
						ka, va := readKV(t, b, alone[i].KV, pos[i]+1, kvd, s.Dh)
						kt, vt := readKV(t, b, together[i].KV, pos[i]+1, kvd, s.Dh)
						for p := range pos[i] + 1 {
							if ka.row(p) != kt.row(p) || va.row(p) != vt.row(p) {
								t.Errorf("%s: row %d's cache row %d differs", what, i, p)
							}
						}
					}
				})
			}
		}
	}
}

// A float32 cache, mixed widths or too many rows go row by row.
func TestAttnRowsFit(t *testing.T) {
	q8, b16, f32 := AttnRow{KV: KVCache{Bits: 8}}, AttnRow{KV: KVCache{Bits: 16}}, AttnRow{KV: KVCache{Bits: 32}}
	for _, tc := range []struct {
		rows []AttnRow
		fit  bool
	}{
		{[]AttnRow{q8, q8}, true}, {[]AttnRow{b16}, true}, {[]AttnRow{f32, f32}, false}, {[]AttnRow{q8, b16}, false},
		{nil, false}, {slices.Repeat([]AttnRow{q8}, MaxRows+1), false}, {slices.Repeat([]AttnRow{q8}, MaxRows), true},
	} {
		if got := AttnRowsFit(tc.rows); got != tc.fit {
			t.Errorf("%d rows (%+v): fit %v, want %v", len(tc.rows), tc.rows, got, tc.fit)
		}
		if tc.fit {
			continue
		}
		// The batched launches refuse what does not fit before they touch a device.
		var l Launcher
		kvErr := l.AttnKVRows(0, 0, 0, 0, tc.rows, AttnShape{}, 0)
		headsErr := l.AttnHeadsRows(0, 0, 0, 0, tc.rows, AttnShape{}, 0)
		for _, err := range []error{kvErr, headsErr} {
			if err == nil || !strings.Contains(err.Error(), "rows whose caches are all int8 or all bfloat16") {
				t.Errorf("%d rows (%+v): %v, want the batched launch refused", len(tc.rows), tc.rows, err)
			}
		}
	}
}

// head_rows copies each row of logits to its own buffer, writes Argmax's
// pick of it (ties to the lowest id, −1 for a row with a NaN) and
// advances its position by one, for 1, 3 and 16 rows.
func TestHeadRowsIsArgmaxCopyAdvance(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const V = 5003
	for _, N := range []int{1, 3, MaxRows} {
		logits := randVec(r, N*V, 3)
		for i := range N {
			row := logits[i*V : (i+1)*V]
			switch i % 3 {
			case 1: // a tie: the lower id wins
				row[17], row[4000] = 100, 100
			case 2:
				row[r.IntN(V)] = float32(math.NaN())
			}
		}
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			dl := b.up(cuda.Bytes(logits))
			dst, next, pos := make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N)
			want := make([]int32, N)
			for i := range N {
				dst[i], next[i], pos[i] = b.poisoned(4*V), b.up(cuda.Bytes([]int32{-7})), b.up(cuda.Bytes([]int32{int32(10 * i)}))
				one := b.up(cuda.Bytes([]int32{-7}))
				if err := l.Argmax(one, dl+cuda.DevicePtr(4*i*V), V); err != nil {
					t.Fatal(err)
				}
				if err := b.c.DtoH(cuda.Bytes(want[i:i+1]), one); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.HeadRows(dl, V, dst, next, pos); err != nil {
				t.Fatal(err)
			}
			for i := range N {
				var got, p [1]int32
				if err := b.c.DtoH(cuda.Bytes(got[:]), next[i]); err != nil {
					t.Fatal(err)
				}
				if err := b.c.DtoH(cuda.Bytes(p[:]), pos[i]); err != nil {
					t.Fatal(err)
				}
				if got[0] != want[i] || p[0] != int32(10*i+1) {
					t.Errorf("%d rows, row %d: pick %d (argmax %d), position %d (want %d)", N, i, got[0], want[i], p[0], 10*i+1)
				}
				if !slices.Equal(cuda.Bytes(b.f32(dst[i], V)), cuda.Bytes(logits[i*V:(i+1)*V])) {
					t.Errorf("%d rows, row %d: the copied logits differ", N, i)
				}
			}
			if want[1%N] != 17 && N > 1 {
				t.Errorf("the tie went to %d, want 17", want[1])
			}
		})
	}
}
