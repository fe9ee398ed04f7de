package blocks

import "math"

// Rope holds the inverse frequencies of partial rotary embedding and the
// factor cos and sin are multiplied by (1 without scaling).
type Rope struct {
	InvFreq []float32 // [rd/2]
	Attn    float32
}

// RopePosFreq is θ^(2j/rd) for j < rd/2, the exponent in float32 as
// transformers computes it.
func RopePosFreq(theta float64, rd int) []float32 {
	posFreq := make([]float32, rd/2)
	for j := range posFreq {
		exponent := float32(2*j) / float32(rd)
		posFreq[j] = float32(math.Pow(theta, float64(exponent)))
	}
	return posFreq
}

// NewRope is plain RoPE: f_j = 1 / θ^(2j/rd) in float32.
func NewRope(theta float64, rd int) Rope {
	posFreq := RopePosFreq(theta, rd)
	r := Rope{InvFreq: make([]float32, rd/2), Attn: 1}
	for j, p := range posFreq {
		r.InvFreq[j] = 1 / p
	}
	return r
}

// Tables fills cos and sin [rd/2] for position p; the angle is rounded to
// float32 before cos/sin, as transformers computes it, and both are then
// multiplied by the attention factor.
func (r Rope) Tables(p int, cos, sin []float32) {
	for j, f := range r.InvFreq {
		angle := float32(p) * f
		cos[j] = float32(math.Cos(float64(angle)))
		sin[j] = float32(math.Sin(float64(angle)))
		if r.Attn != 1 {
			cos[j] *= r.Attn
			sin[j] *= r.Attn
		}
	}
}
