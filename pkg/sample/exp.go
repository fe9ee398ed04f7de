package sample

import "math"

// Exp is e**x computed from IEEE additions, multiplications and divisions
// alone, each rounded on its own, so that every machine gets the same bits:
// Go's math.Exp is assembly on amd64 (and may fuse multiply-adds on other
// architectures), and CUDA's exp is another algorithm again. kernels.cu's
// pexp is this function step for step, which is what lets the GPU engine
// sample the CPU engine's tokens. The method is FreeBSD's e_exp.c (the one
// Go's portable math.Exp uses): x = k·ln2 + r, a rational approximation of
// e**r, then a scale by 2**k; it is within 1 ulp of e**x.
//
// The explicit float64 conversions keep the compiler from fusing a product
// into the next addition.
func Exp(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
		log2e = 1.44269504088896338700e+00
		p1    = 1.66666666666666657415e-01
		p2    = -2.77777777770155933842e-03
		p3    = 6.61375632143793436117e-05
		p4    = -1.65339022054652515390e-06
		p5    = 4.13813679705723846039e-08

		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
	)
	switch {
	case x != x || x > overflow:
		return x * math.Inf(1) // NaN stays NaN
	case x < underflow:
		return 0
	}
	var k int
	if x < 0 {
		k = int(float64(log2e*x) - 0.5)
	} else {
		k = int(float64(log2e*x) + 0.5)
	}
	hi := x - float64(float64(k)*ln2Hi)
	lo := float64(k) * ln2Lo
	r := hi - lo
	t := float64(r * r)
	c := float64(t * p5)
	c = float64(t * (p4 + c))
	c = float64(t * (p3 + c))
	c = float64(t * (p2 + c))
	c = r - float64(t*(p1+c))
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return scale2(y, k)
}

// scale2 is y·2**k for y near 1 and −1075 ≤ k ≤ 1024, as multiplications
// by exact powers of two: one rounding when the result is subnormal.
func scale2(y float64, k int) float64 {
	switch {
	case k < -1021:
		return float64(y*pow2(k+54)) * pow2(-54)
	case k > 1023:
		return float64(y*pow2(k-1)) * 2
	}
	return y * pow2(k)
}

// pow2 is 2**k for a normal power (−1022 ≤ k ≤ 1023).
func pow2(k int) float64 { return math.Float64frombits(uint64(k+1023) << 52) }
