package kernels

import "fmt"

// DeltaRule is one token of the gated delta rule for one head, fused:
//
//	S ← decay·S;  p = Sᵀk;  δ = (v − p)·β;  S ← S + k⊗δ;  o = Sᵀq
//
// S has len(k) rows of len(v) columns (row-major); q has len(k) values and o
// len(v). It is bitwise the two passes it replaced (S ← decay·S and p over
// all rows, then the update and o; every product and sum rounded on its
// own, sums over rows ascending), but it reads S from memory once instead
// of twice and writes it once instead of twice: δ for a column depends only on that column, so each block of
// columns is finished (p, δ, the update, o) while its rows are still in L1.
// The state is 2 MiB per Gated DeltaNet layer of Qwen3.5-35B-A3B, read and
// written every token, so this halves the recurrence's memory traffic.
//
// DeltaRule expects the next call to be the next head's, whose state
// follows S in memory, and prefetches it; DeltaRuleSameHead is for calls
// that run one head over many tokens.
func DeltaRule(S []float32, decay, beta float32, k, v, q, o []float32) {
	deltaRule(S, decay, beta, k, v, q, o, 4*len(S))
}

// DeltaRuleSameHead is DeltaRule without prefetching the next head's state,
// for a caller that runs the same head (S stays in cache) over a chunk's
// tokens. The results are the same.
func DeltaRuleSameHead(S []float32, decay, beta float32, k, v, q, o []float32) {
	deltaRule(S, decay, beta, k, v, q, o, 0)
}

func deltaRule(S []float32, decay, beta float32, k, v, q, o []float32, next int) {
	rows, cols := len(k), len(v)
	checkRows("DeltaRule", S, rows, cols)
	if len(q) != rows || len(o) != cols {
		panic(fmt.Sprintf("kernels.DeltaRule: %d rows need %d values of q (got %d); %d columns need %d of o (got %d)",
			rows, rows, len(q), cols, cols, len(o)))
	}
	if rows == 0 || cols == 0 {
		clear(o)
		return
	}
	if deltaRuleAsm(S, decay, beta, k, v, q, o, next) {
		return
	}
	deltaRuleGeneric(S, decay, beta, k, v, q, o)
}

// deltaRuleBlock is the reference's column block: its p and δ live in
// arrays on the stack.
const deltaRuleBlock = 64

// deltaRuleGeneric is the reference for deltaRuleAsm, column block by
// column block like it (the order of operations within each column is all
// that matters for the result).
func deltaRuleGeneric(S []float32, decay, beta float32, k, v, q, o []float32) {
	cols := len(v)
	var p, delta [deltaRuleBlock]float32
	for j0 := 0; j0 < cols; j0 += deltaRuleBlock {
		w := min(deltaRuleBlock, cols-j0)
		clear(p[:w])
		for i, ki := range k {
			row := S[i*cols+j0 : i*cols+j0+w]
			for j, s := range row {
				p[j] += float32(float32(s*decay) * ki)
			}
		}
		for j := range w {
			delta[j] = float32(v[j0+j]-p[j]) * beta
		}
		out := o[j0 : j0+w]
		clear(out)
		for i, ki := range k {
			row := S[i*cols+j0 : i*cols+j0+w]
			qi := q[i]
			for j, s := range row {
				s = float32(s*decay) + float32(ki*delta[j])
				row[j] = s
				out[j] += float32(s * qi)
			}
		}
	}
}
