package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The block of docs/gpu.md and README.md that --apply rewrites.
const (
	markStart = "<!-- vs-llamacpp-gpu:start -->"
	markEnd   = "<!-- vs-llamacpp-gpu:end -->"
)

// replaceBlock puts body between the markers of s.
func replaceBlock(s, body, name string) (string, error) {
	i, j := strings.Index(s, markStart), strings.Index(s, markEnd)
	if i < 0 || j < 0 || j < i {
		return "", fmt.Errorf("%s has no %s … %s block: add the two marker lines where the table goes", name, markStart, markEnd)
	}
	return s[:i+len(markStart)] + "\n" + strings.TrimRight(body, "\n") + "\n" + s[j:], nil
}

// summary is README's one line: per width, nvmai's rate over the faster of
// llama.cpp's two flash-attention settings, test by test.
func summary(recs []Record) string {
	if len(recs) == 0 {
		return "nvmai `--engine gpu` beside llama.cpp's CUDA backend: not measured yet (`scripts/vs-llamacpp-gpu.sh`, [docs/gpu.md](docs/gpu.md#nvmai-beside-llamacpps-cuda-backend))."
	}
	gs := groups(recs)
	var parts []string
	for _, g := range gs {
		var rs []string
		for _, k := range g.rows() {
			nv, _ := g.samples(columns[0], k)
			off, _ := g.samples(columns[1], k)
			on, _ := g.samples(columns[2], k)
			best := 0.0
			for _, v := range [][]float64{off, on} {
				if len(v) > 0 {
					best = max(best, median(v))
				}
			}
			if len(nv) == 0 || best == 0 {
				continue
			}
			what := strings.TrimSuffix(k.label(g.decodeTokens()), " tok/s")
			rs = append(rs, fmt.Sprintf("%s %.2f×", what, median(nv)/best))
		}
		if len(rs) > 0 {
			parts = append(parts, fmt.Sprintf("%d-bit (%d layers): %s", g.width, g.layers, strings.Join(rs, ", ")))
		}
	}
	date := ""
	for _, r := range recs {
		if len(r.Date) >= 10 && r.Date[:10] > date {
			date = r.Date[:10]
		}
	}
	cards := []string{}
	for _, g := range gs {
		if len(cards) == 0 || cards[len(cards)-1] != g.card {
			cards = append(cards, g.card)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("nvmai `--engine gpu` beside llama.cpp's CUDA backend on %s, %s: no test ran in both engines; see [docs/gpu.md](docs/gpu.md#nvmai-beside-llamacpps-cuda-backend).", strings.Join(cards, ", "), date)
	}
	return fmt.Sprintf("nvmai `--engine gpu` ÷ llama.cpp's CUDA backend (its faster flash-attention setting), tok/s, on %s, %s: %s. Table, ranges and the HBM bound: [docs/gpu.md](docs/gpu.md#nvmai-beside-llamacpps-cuda-backend) (`scripts/vs-llamacpp-gpu.sh`).",
		strings.Join(cards, ", "), date, strings.Join(parts, "; "))
}

// apply rewrites the block of each file: README.md gets the one-line
// summary, any other file the table. Each file is written whole to a
// temporary file beside it and renamed over it.
func apply(recs []Record, files []string) error {
	for _, f := range files {
		old, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		body := table(recs)
		if strings.EqualFold(filepath.Base(f), "README.md") {
			body = summary(recs)
		}
		s, err := replaceBlock(string(old), body, f)
		if err != nil {
			return err
		}
		if s == string(old) {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		tmp := f + ".vs-llamacpp-gpu.tmp"
		if err := os.WriteFile(tmp, []byte(s), st.Mode().Perm()); err != nil {
			return err
		}
		if err := os.Rename(tmp, f); err != nil {
			os.Remove(tmp)
			return err
		}
		fmt.Printf("rewrote the %s … %s block of %s\n", markStart, markEnd, f)
	}
	return nil
}
