package kernels

import (
	"sync"
	"unsafe"
)

// The batched integer path (qbatch_amd64.go): a product of a Q4/Q8 matrix
// with qBatchMinTokens or more tokens runs 16 tokens per kernel call (32,
// two blocks, for a kernel with a single form), the token in the vector
// lane, instead of one token at a time. It gives every
// output bitwise what qRowsGeneric gives (TestQBatchBitwise): the integer
// dots are exact in any order and the float combination of each (row,
// token) is the reference's, operation for operation.

// qBatchMinTokens is the fewest tokens the batched path takes, Q8 and Q4:
// with fewer, most of its 16 lanes idle and the token-by-token kernels are
// faster (BenchmarkQBatch: with AVX-512 Q8 wins from ~6 tokens, with AVX2
// from ~8; Q4, which also unpacks its codes per call, from ~10 with
// either).
func qBatchMinTokens(enc Encoding) int {
	if enc == Q8 {
		return qBatchMinTokensQ8
	}
	return 10
}

// qBatchLanes is the tokens one batched kernel call computes.
const qBatchLanes = 16

// qBatchEnabled turns the batched path on where the CPU has it; the tests
// turn it off to compare.
var qBatchEnabled = qBatchAvailable

// qBatchLayout is a QActivation's tokens rearranged for the batched kernel,
// per block of 16 tokens: xqT, per group g and dword k of the group, the 16
// tokens' 4 bytes (VNNI order; Q4 takes the group's even elements then its
// odd ones, as qUnpackQ4 leaves the weights), and dsT, per group, the 16
// tokens' dx then their Σx. Tokens past the last are zero.
type qBatchLayout struct {
	xqT []uint32 // [blocks][groups][16 dwords][16 tokens]
	dsT []float32
}

// qBatchKernel is one batched kernel (qbatch_amd64.go) and the row multiple
// it takes.
type qBatchKernel struct {
	name string
	rows int // rows per call must be a multiple of this
	// convert: the kernel takes the rows' parameters converted by
	// qConvertScales (scales: the converted block, tail: the biases' byte
	// offset) instead of bf16 scales, biases and the tail mask.
	convert bool
	// widen: the kernel takes Q8 rows widened to a uint16 per code
	// (qWidenRows; its Q4 products go to q4); unpackAVX2: Q4 rows unpacked
	// by qUnpackQ4AVX2 instead of the AVX-512 unpacking.
	widen, unpackAVX2 bool
	// q4, when set, is the kernel that takes this one's Q4 products.
	q4 *qBatchKernel
	// unfused is the plain kernel a fused one gives way to on short rows
	// (qBatchFusedMinGroups).
	unfused *qBatchKernel
	// single, when set, marks a kernel that takes two blocks of 16 tokens
	// per call (idx's 32 entries, mask's 32 bits); single computes a last
	// odd block.
	single *qBatchKernel
	fn     func(dst *float32, w *byte, stride int, scales, biases *byte, rows, groups int, xqT *int8, dsT *float32, idx *int32, mask int, work *byte, tail int)
}

// qBatchScratch is one kernel caller's scratch: the unpacked Q4 rows of a
// chunk, the kernel's work area and the tokens' dst offsets.
type qBatchScratch struct {
	unpacked []byte
	scalesT  []float32 // a chunk's converted parameters (qBatchKernel.convert)
	work     []byte
	idx      [2 * qBatchLanes]int32 // two blocks' worth (qBatchKernel.single)
}

var qBatchPool = sync.Pool{New: func() any { return new(qBatchScratch) }}

// qBatchWorkBytes is the kernel's work area for rows of groups groups: the
// results of a block of rows, the converted scales and biases of a row, the
// dots of the block.
func qBatchWorkBytes(groups int) int {
	gpad := (groups + blockGroups - 1) &^ (blockGroups - 1)
	return max(16*qBatchLanes*4+8*gpad+groups*16*qBatchLanes*4, // results and dots of up to 16 rows
		(16+256+16)*qBatchLanes*4, // qBatchAMXFused: results, accumulators, one group's dots
		(16+16+256)*qBatchLanes*4) // qBatchAVX512Fused: results, alignment slack, accumulators
}

// batchLayout returns qa's tokens in the batched kernel's layout for enc,
// building it on first use after Quantize (the pool's threads share it).
func (qa *QActivation) batchLayout(enc Encoding) *qBatchLayout {
	i := 0
	if enc == Q8 {
		i = 1
	}
	qa.batchMu.Lock()
	defer qa.batchMu.Unlock()
	if !qa.batchValid[i] {
		qa.batch[i].build(qa, enc)
		qa.batchValid[i] = true
	}
	return &qa.batch[i]
}

func (l *qBatchLayout) build(qa *QActivation, enc Encoding) {
	l.size(qa)
	l.buildBlocks(qa, enc, 0, qBatchBlocks(qa.tokens))
}

// qBatchBlocks is the blocks of 16 tokens that hold tokens.
func qBatchBlocks(tokens int) int { return (tokens + qBatchLanes - 1) / qBatchLanes }

// size sizes l for qa's tokens.
func (l *qBatchLayout) size(qa *QActivation) {
	blocks := qBatchBlocks(qa.tokens)
	l.xqT = grow(l.xqT, blocks*qa.groups*16*qBatchLanes)
	l.dsT = grow(l.dsT, blocks*qa.groups*2*qBatchLanes)
}

// buildBlocks writes blocks [b0, b1) of l (sized) from qa's tokens, which
// must be quantized; blocks are independent, so threads may build disjoint
// spans at once.
func (l *qBatchLayout) buildBlocks(qa *QActivation, enc Encoding, b0, b1 int) {
	groups := qa.groups
	words := groups * 16 * qBatchLanes // one block's xqT
	for b := b0; b < b1; b++ {
		xT := l.xqT[b*words : (b+1)*words]
		dT := l.dsT[b*groups*2*qBatchLanes : (b+1)*groups*2*qBatchLanes]
		for t := range qBatchLanes {
			tok := b*qBatchLanes + t
			if tok >= qa.tokens {
				for j := range groups * 16 {
					xT[j*qBatchLanes+t] = 0
				}
				for g := range groups {
					dT[g*2*qBatchLanes+t], dT[g*2*qBatchLanes+qBatchLanes+t] = 0, 0
				}
				continue
			}
			ds := qa.tokenDS(tok)
			for g := range groups {
				dT[g*2*qBatchLanes+t] = ds[dsIndex(g)]
				dT[g*2*qBatchLanes+qBatchLanes+t] = ds[dsIndex(g)+blockGroups]
			}
			if enc == Q8 {
				src := int8Words(qa.tokenQ8(tok))[:groups*16]
				for j, v := range src {
					xT[j*qBatchLanes+t] = v
				}
				continue
			}
			// Q4: group g of pair g/2 has its even elements at dwords
			// [g%2·8, +8) of the pair's 32 and its odd ones 16 further.
			src := int8Words(qa.tokenQ4(tok))
			for g := range groups {
				base := g/2*32 + g%2*8
				for k := range 8 {
					xT[(g*16+k)*qBatchLanes+t] = src[base+k]
					xT[(g*16+8+k)*qBatchLanes+t] = src[base+16+k]
				}
			}
		}
	}
}

// int8Words views quantized activations (cache-line aligned, a whole number
// of blocks) as little-endian dwords.
func int8Words(q []int8) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(&q[0])), len(q)/4)
}

// qMatMulBatched is qMatMulRows through the batched kernels: rows [lo, hi)
// for every token of qa into dst (tokens×Rows). The active kernel takes the
// rows in its multiple (16 for AMX, 8 for AVX-512, 2 for AVX2), the AVX-512
// kernel a remaining multiple of 8, and the last few rows go token by token.
func qMatMulBatched(dst []float32, m *Matrix, qa *QActivation, lo, hi int) {
	groups := m.Cols / GroupSize
	var l *qBatchLayout
	var sc *qBatchScratch
	for _, k := range qBatchSteps(groups) {
		mid := lo + (hi-lo)/k.rows*k.rows
		if mid == lo {
			continue
		}
		if l == nil {
			l = qa.batchLayout(m.Enc)
			sc = qBatchPool.Get().(*qBatchScratch)
			sc.work = grow(sc.work, qBatchWorkBytes(groups))
			for t := range sc.idx {
				sc.idx[t] = int32(t * m.Rows * 4)
			}
		}
		qBatchRange(k, dst, m, qa, l, sc, lo, mid)
		lo = mid
	}
	if sc != nil {
		qBatchPool.Put(sc)
	}
	if lo < hi {
		for tok := range qa.tokens {
			qRows(dst[tok*m.Rows:(tok+1)*m.Rows], m, qa, tok, lo, hi)
		}
	}
}

// qBatchRange runs kernel k over rows [lo, hi) (a multiple of k.rows), row
// chunk by row chunk, each chunk against every block of 16 tokens while it
// sits in L2.
func qBatchRange(k qBatchKernel, dst []float32, m *Matrix, qa *QActivation, l *qBatchLayout, sc *qBatchScratch, lo, hi int) {
	if m.Enc == Q4 && k.q4 != nil {
		k = *k.q4
	}
	groups := m.Cols / GroupSize
	tail := 1<<(groups%blockGroups) - 1
	if groups%blockGroups == 0 {
		tail = 1<<blockGroups - 1
	}
	rowBytes := qRowBytes(m)
	if k.widen {
		rowBytes = 2 * m.Cols
	}
	chunk := max(k.rows, matMulChunkBytes/rowBytes/k.rows*k.rows)
	blocks := (qa.tokens + qBatchLanes - 1) / qBatchLanes
	words := groups * 16 * qBatchLanes
	for c := lo; c < hi; c += chunk {
		end := min(c+chunk, hi)
		var w []byte
		if k.widen {
			sc.unpacked = qWidenRows(sc.unpacked, m, c, end)
			w = sc.unpacked
		} else if m.Enc == Q4 {
			sc.unpacked = grow(sc.unpacked, (end-c)*m.Cols)
			qUnpackQ4(sc.unpacked, m.Data[c*m.Cols/2:end*m.Cols/2], end-c, groups, k.unpackAVX2)
			w = sc.unpacked
		} else {
			w = m.Data[c*m.Cols : end*m.Cols]
		}
		// The assembly trusts these bounds.
		_ = m.Scales[end*groups*2-1]
		_ = m.Biases[end*groups*2-1]
		scales, biases, tailArg := &m.Scales[c*groups*2], &m.Biases[c*groups*2], tail
		if k.convert {
			var off int
			sc.scalesT, off = qConvertScales(sc.scalesT, m, c, end)
			scales, biases, tailArg = (*byte)(unsafe.Pointer(&sc.scalesT[0])), nil, off
		}
		for b := 0; b < blocks; {
			fn, span := k.fn, 1
			if k.single != nil {
				if span = 2; b+1 == blocks {
					fn, span = k.single.fn, 1
				}
			}
			n := min(span*qBatchLanes, qa.tokens-b*qBatchLanes) // tokens of the call
			_ = dst[(b*qBatchLanes+n-1)*m.Rows+end-1]
			xqT := l.xqT[b*words : (b+span)*words]
			dsT := l.dsT[b*groups*2*qBatchLanes : (b+span)*groups*2*qBatchLanes]
			fn(&dst[b*qBatchLanes*m.Rows+c], &w[0], m.Cols, scales, biases,
				end-c, groups, (*int8)(unsafe.Pointer(&xqT[0])), &dsT[0], &sc.idx[0], 1<<n-1, &sc.work[0], tailArg)
			b += span
		}
	}
}
