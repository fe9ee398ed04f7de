package server

// TopK maps a request's top_k onto sample.Params.TopK: 0 and -1 (the "off"
// of vLLM and llama.cpp clients) disable it; below -1 is refused rather
// than silently turned off (#44 S4).
func TopK(k int, param string) (int, error) {
	switch {
	case k == -1:
		return 0, nil
	case k < -1:
		return 0, invalid(param, "%s %d must be ≥ 0 (0 or -1 = disabled)", param, k)
	}
	return k, nil
}
