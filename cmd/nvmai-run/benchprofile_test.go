package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// bench --engine gpu carries the decode profile: its table in the text
// report, gpu.decode_profile in --json.
func TestBenchReportsTheGPUDecodeProfile(t *testing.T) {
	p := &gpu.DecodeProfile{Steps: 5, Context: 18, Launches: 2, SumUs: 30, Bytes: 3 << 20, CopyBandwidth: 3e12, GraphUs: 27, GraphOverSum: 0.9,
		Kernels: []gpu.KernelTime{
			{Kernel: "moe/mgemv", Launches: 1, UsPerStep: 20, Share: 2.0 / 3, Bytes: 3 << 20, GBs: 157, OfCopyBW: 0.05},
			{Kernel: "moe/route", Launches: 1, UsPerStep: 10, Share: 1.0 / 3},
		}}
	r := &runtime.BenchReport{Engine: "gpu", GPU: &gpu.BenchInfo{Device: "NVIDIA H100", DecodeProfile: p}}
	var out bytes.Buffer
	printBench(&out, r)
	for _, want := range []string{"gpu decode profile (5 steps at 18 tokens of context", "gpu decode  moe/mgemv", "gpu decode  moe/route"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, out.String())
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		GPU struct {
			DecodeProfile struct {
				Kernels []struct {
					Kernel string  `json:"kernel"`
					GBs    float64 `json:"gb_s"`
				} `json:"kernels"`
				SumUs float64 `json:"sum_us_per_step"`
			} `json:"decode_profile"`
		} `json:"gpu"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if d := back.GPU.DecodeProfile; len(d.Kernels) != 2 || d.Kernels[0].Kernel != "moe/mgemv" || d.Kernels[0].GBs != 157 || d.SumUs != 30 {
		t.Errorf("gpu.decode_profile = %+v in %s", d, js)
	}
}
