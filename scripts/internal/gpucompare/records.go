package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Engines, as runs.jsonl names them.
const (
	engineNvmai = "nvmai"
	engineLlama = "llama.cpp"
)

// Record is one line of runs.jsonl: one engine's measurement of one test in
// one round (every sample of it), with what the table's caption needs.
type Record struct {
	Card   string `json:"card"`
	Driver string `json:"driver,omitempty"`
	Date   string `json:"date"`             // UTC, RFC 3339
	Commit string `json:"commit,omitempty"` // nvmai's, from --prepare
	Llama  string `json:"llama_cpp,omitempty"`
	Width  int    `json:"width"` // 4 or 8 bits
	Layers int    `json:"layers"`
	Round  int    `json:"round"`
	First  string `json:"first"` // the engine that went first this round
	Note   string `json:"note,omitempty"`

	Engine    string    `json:"engine"`
	FlashAttn *bool     `json:"flash_attn,omitempty"` // llama.cpp only
	Test      string    `json:"test"`                 // "prefill" or "decode"
	Tokens    int       `json:"tokens"`               // prompt tokens (prefill), generated tokens (decode)
	Depth     int       `json:"depth"`                // tokens of context before the test
	TokS      []float64 `json:"tok_s,omitempty"`      // every sample
	// WeightBytes is what one decode step reads of the weights (nvmai's
	// report; for llama.cpp, the GGUF's header, decodeBytesPerToken).
	WeightBytes int64 `json:"weight_bytes_per_token,omitempty"`
	// CopyBandwidth is nvmai-run bench's device-to-device copy, bytes read
	// + written per second, measured in the same run.
	CopyBandwidth float64 `json:"copy_bytes_per_s,omitempty"`
	Failed        string  `json:"failed,omitempty"`
}

// llamaBenchTest is one test of `llama-bench -o json`.
type llamaBenchTest struct {
	BuildCommit string    `json:"build_commit"`
	BuildNumber int       `json:"build_number"`
	GPUInfo     string    `json:"gpu_info"`
	NPrompt     int       `json:"n_prompt"`
	NGen        int       `json:"n_gen"`
	NDepth      int       `json:"n_depth"`
	FlashAttn   int       `json:"flash_attn"` // -1 auto, 0 off, 1 on
	SamplesTS   []float64 `json:"samples_ts"`
	AvgTS       float64   `json:"avg_ts"`
}

// llamaRecords turns llama-bench's JSON array into records on meta.
func llamaRecords(data []byte, meta Record) ([]Record, error) {
	var tests []llamaBenchTest
	if err := json.Unmarshal(data, &tests); err != nil {
		return nil, fmt.Errorf("llama-bench output is not its -o json array: %w", err)
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("llama-bench output has no tests")
	}
	var out []Record
	for i, t := range tests {
		r := meta
		r.Engine = engineLlama
		switch {
		case t.NPrompt > 0 && t.NGen == 0:
			r.Test, r.Tokens = "prefill", t.NPrompt
		case t.NGen > 0 && t.NPrompt == 0:
			r.Test, r.Tokens = "decode", t.NGen
		default:
			return nil, fmt.Errorf("llama-bench test %d has n_prompt %d and n_gen %d: run prompt and generation tests apart (-p P -n 0, -p 0 -n N)", i, t.NPrompt, t.NGen)
		}
		r.Depth = t.NDepth
		switch t.FlashAttn {
		case 0, 1:
			fa := t.FlashAttn == 1
			r.FlashAttn = &fa
		default:
			return nil, fmt.Errorf("llama-bench test %d has flash_attn %d (auto): pass -fa 0,1 so each test says which", i, t.FlashAttn)
		}
		r.TokS = t.SamplesTS
		if len(r.TokS) == 0 && t.AvgTS > 0 {
			r.TokS = []float64{t.AvgTS}
		}
		if len(r.TokS) == 0 {
			return nil, fmt.Errorf("llama-bench test %d has no samples_ts", i)
		}
		out = append(out, r)
	}
	return out, nil
}

// nvmaiBench is what the records need of `nvmai-run bench --json`.
type nvmaiBench struct {
	Engine      string `json:"engine"`
	WeightBytes int64  `json:"weight_bytes_per_token"`
	Runs        []struct {
		PromptTokens int     `json:"prompt_tokens"`
		Generated    int     `json:"generated_tokens"`
		PrefillTokS  float64 `json:"prefill_tok_s"`
		DecodeTokS   float64 `json:"decode_tok_s"`
	} `json:"runs"`
	GPU *struct {
		Device        string  `json:"device"`
		Driver        int     `json:"driver"`
		TokenBytes    int64   `json:"weight_bytes_per_token"`
		CopyBandwidth float64 `json:"copy_bytes_per_s"`
		Error         string  `json:"error"`
	} `json:"gpu"`
}

// nvmaiRecords turns one `nvmai-run bench --engine gpu --json` report into a
// prefill record (of its prompt length) and a decode record (after as many
// tokens), each with every prompt's figure as a sample.
func nvmaiRecords(data []byte, meta Record) ([]Record, error) {
	var b nvmaiBench
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("nvmai-run bench output is not its --json report: %w", err)
	}
	if len(b.Runs) == 0 {
		return nil, fmt.Errorf("nvmai-run bench report has no runs")
	}
	if b.GPU == nil {
		return nil, fmt.Errorf("nvmai-run bench report has no gpu section (engine %q): was it run with --engine gpu?", b.Engine)
	}
	if b.GPU.Error != "" {
		return nil, fmt.Errorf("nvmai-run bench's device measurement failed: %s", b.GPU.Error)
	}
	base := meta
	base.Engine = engineNvmai
	base.WeightBytes = b.GPU.TokenBytes
	if base.WeightBytes == 0 {
		base.WeightBytes = b.WeightBytes
	}
	base.CopyBandwidth = b.GPU.CopyBandwidth
	pf, dc := base, base
	pf.Test, pf.Tokens = "prefill", b.Runs[0].PromptTokens
	dc.Test, dc.Tokens, dc.Depth = "decode", b.Runs[0].Generated, b.Runs[0].PromptTokens
	for i, r := range b.Runs {
		if r.PromptTokens != pf.Tokens || r.Generated != b.Runs[0].Generated {
			return nil, fmt.Errorf("nvmai-run bench run %d has %d prompt and %d generated tokens, run 0 %d and %d: pass --prompt-tokens", i, r.PromptTokens, r.Generated, pf.Tokens, b.Runs[0].Generated)
		}
		pf.TokS = append(pf.TokS, r.PrefillTokS)
		dc.TokS = append(dc.TokS, r.DecodeTokS)
	}
	return []Record{pf, dc}, nil
}

// jsonLine is r as one line of runs.jsonl.
func jsonLine(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}

// readRecords reads runs.jsonl; a line that does not parse is an error
// naming its number.
func readRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRecords(f, path)
}

func parseRecords(r io.Reader, name string) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if rec.Engine != engineNvmai && rec.Engine != engineLlama {
			return nil, fmt.Errorf("%s:%d: engine %q, want %q or %q", name, n, rec.Engine, engineNvmai, engineLlama)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}
