package kernels

// Implementation names the integer Q4/Q8 kernel this build runs on this CPU
// ("AVX512VNNI", "AVX2", "NEON-SDOT" or "generic"), for labelling
// benchmark results.
func Implementation() string {
	if len(qImplementations) > 0 {
		return qImplementations[0].name
	}
	return "generic"
}
