package gpu

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The bytes model of the launches that read no weights: the KV rows at the
// step's context (int8 with its scales, bfloat16, float32), the scores the
// values pass rereads, the delta rule's state both ways, the conv state,
// the residual row, the logits; the rest count 0.
func TestDecodeStateBytes(t *testing.T) {
	g := geometry{H: 2048, V: 1000, C: 8192, K: 4, kvd: 512,
		gdn:  gpukernels.GDNShape{C: 8192, Hk: 16, Hv: 32, Dk: 128, Dv: 128},
		attn: gpukernels.AttnShape{Hq: 16, Hkv: 2, Dh: 256, Half: 32}}
	for _, tc := range []struct {
		kernel string
		ctx    int
		bits   int
		want   int64
	}{
		{"attn_scores_q8", 100, model.KVInt8, 100 * (512 + 4*512/64)},
		{"attn_values_q8", 100, model.KVInt8, 100*(512+4*512/64) + 4*16*100},
		{"attn_scores_bf16", 100, model.KVBF16, 100 * 1024},
		{"attn_scores", 7, model.KVFloat32, 7 * 2048},
		{"attn_values", 7, model.KVFloat32, 7*2048 + 4*16*7},
		{"attn_kv_q8", 100, model.KVInt8, 2 * 4 * 512},
		{"gdn_rec_reg", 100, model.KVInt8, 2 * 4 * 32 * 128 * 128},
		{"gdn_rec", 1, model.KVInt8, 2 * 4 * 32 * 128 * 128},
		{"gdn_heads", 1, model.KVInt8, 2 * 4 * 32 * 128 * 128},
		{"gdn_conv", 1, model.KVInt8, 4 * 8192 * 8},
		{"rmsnorm_q", 1, model.KVInt8, 4 * 2048},
		{"rmsnorm", 1, model.KVInt8, 4 * 2048},
		{"argmax", 1, model.KVInt8, 4 * 1000},
		{"mgemv", 100, model.KVInt8, 0}, // weights: the launcher's LastReads
		{"slot_fill", 100, model.KVInt8, 0},
		{"gdn_norm", 100, model.KVInt8, 0},
	} {
		if got := decodeStateBytes(tc.kernel, g, tc.ctx, tc.bits); got != tc.want {
			t.Errorf("decodeStateBytes(%s, ctx %d, %d bits) = %d, want %d", tc.kernel, tc.ctx, tc.bits, got, tc.want)
		}
	}
}

// Launches take the phase that ended first after them, as the phase split
// names them; launches after the last mark are "?".
func TestLabelPhases(t *testing.T) {
	s := []launchSample{{kernel: "embed"}, {kernel: "rmsnorm_q"}, {kernel: "mgemv"}, {kernel: "moe_down"}, {kernel: "argmax"}, {kernel: "advance"}}
	labelPhases(s, []int{1, 3, 4, 4}, []string{PhaseEmbed, PhaseGDN, PhaseMoE, "never"})
	want := []string{"embed/embed", "gdn/rmsnorm_q", "gdn/mgemv", "moe/moe_down", "?/argmax", "?/advance"}
	for i, w := range want {
		if s[i].kernel != w {
			t.Errorf("launch %d named %q, want %q", i, s[i].kernel, w)
		}
	}
}

func TestDecodeProfileOn(t *testing.T) {
	for _, tc := range []struct {
		env     string
		on, err bool
	}{{"", true, false}, {"1", true, false}, {"0", false, false}, {"yes", false, true}, {"2", false, true}} {
		on, err := decodeProfileOn(tc.env)
		if on != tc.on || (err != nil) != tc.err {
			t.Errorf("decodeProfileOn(%q) = %v, %v; want %v (error %v)", tc.env, on, err, tc.on, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), "NVMAI_GPU_DECODE_PROFILE") {
			t.Errorf("the error does not name the variable: %v", err)
		}
	}
}

// The aggregation: per kernel the launches and bytes a step (the steps'
// mean), the time a step (the median of each step's total, so one
// disturbed step does not move it), the share of the summed step, the
// rate against the copy bandwidth; rows by time, longest first.
func TestAggregateDecodeProfile(t *testing.T) {
	const copyBW = 3e12 // bytes/s, read + written
	mib := int64(1 << 20)
	step := func(moeUs, normUs float64, kv int64) []launchSample {
		return []launchSample{
			{kernel: "moe/mgemv", us: moeUs / 2, bytes: 3 * mib, weights: 3 * mib},
			{kernel: "gdn/rmsnorm_q", us: normUs, bytes: 8 << 10},
			{kernel: "moe/mgemv", us: moeUs / 2, bytes: 3 * mib, weights: 3 * mib},
			{kernel: "attention/attn_scores_q8", us: 4, bytes: kv},
			{kernel: "lm_head/advance", us: 1},
		}
	}
	type row struct {
		kernel   string
		launches int
		us       float64
		bytes    int64
	}
	for _, tc := range []struct {
		name    string
		steps   [][]launchSample
		copyBW  float64
		rows    []row
		weights int64
	}{
		{"three steps, one disturbed", [][]launchSample{step(20, 2, 1000), step(21, 2, 1001), step(90, 3, 1002)}, copyBW,
			[]row{{"moe/mgemv", 2, 21, 6 * mib}, {"attention/attn_scores_q8", 1, 4, 1001}, {"gdn/rmsnorm_q", 1, 2, 8 << 10}, {"lm_head/advance", 1, 1, 0}}, 6 * mib},
		{"two steps: the median is their mean", [][]launchSample{step(20, 2, 1000), step(30, 4, 1000)}, 0,
			[]row{{"moe/mgemv", 2, 25, 6 * mib}, {"attention/attn_scores_q8", 1, 4, 1000}, {"gdn/rmsnorm_q", 1, 3, 8 << 10}, {"lm_head/advance", 1, 1, 0}}, 6 * mib},
		{"a kernel one step lacks", [][]launchSample{step(20, 2, 1000), step(20, 2, 1000)[:4], step(20, 2, 1000)}, copyBW,
			[]row{{"moe/mgemv", 2, 20, 6 * mib}, {"attention/attn_scores_q8", 1, 4, 1000}, {"gdn/rmsnorm_q", 1, 2, 8 << 10}, {"lm_head/advance", 1, 1, 0}}, 6 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := aggregateDecodeProfile(tc.steps, tc.copyBW)
			if p.Steps != len(tc.steps) || len(p.Kernels) != len(tc.rows) {
				t.Fatalf("%d steps, %d rows; want %d, %d: %+v", p.Steps, len(p.Kernels), len(tc.steps), len(tc.rows), p.Kernels)
			}
			var sum float64
			var bytes int64
			launches := 0
			for i, w := range tc.rows {
				r := p.Kernels[i]
				if r.Kernel != w.kernel || r.Launches != w.launches || math.Abs(r.UsPerStep-w.us) > 1e-9 || r.Bytes != w.bytes {
					t.Errorf("row %d = %+v, want %+v", i, r, w)
				}
				sum += w.us
				bytes += w.bytes
				launches += w.launches
			}
			if math.Abs(p.SumUs-sum) > 1e-9 || p.Bytes != bytes || p.Launches != launches || p.WeightBytes != tc.weights {
				t.Errorf("totals %.3f µs, %d bytes, %d launches, %d weight bytes; want %.3f, %d, %d, %d", p.SumUs, p.Bytes, p.Launches, p.WeightBytes, sum, bytes, launches, tc.weights)
			}
			for _, r := range p.Kernels {
				if math.Abs(r.Share-r.UsPerStep/sum) > 1e-12 {
					t.Errorf("%s: share %v, want %v", r.Kernel, r.Share, r.UsPerStep/sum)
				}
				wantGBs := 0.0
				if r.Bytes > 0 {
					wantGBs = float64(r.Bytes) / r.UsPerStep / 1e3
				}
				if math.Abs(r.GBs-wantGBs) > 1e-9 {
					t.Errorf("%s: %.3f GB/s, want %.3f", r.Kernel, r.GBs, wantGBs)
				}
				wantOf := 0.0
				if tc.copyBW > 0 {
					wantOf = wantGBs * 1e9 / tc.copyBW
				}
				if math.Abs(r.OfCopyBW-wantOf) > 1e-12 {
					t.Errorf("%s: %.4f of the copy rate, want %.4f", r.Kernel, r.OfCopyBW, wantOf)
				}
			}
		})
	}
	if p := aggregateDecodeProfile(nil, copyBW); len(p.Kernels) != 0 || p.SumUs != 0 || p.Lines(12) != nil {
		t.Errorf("no steps gave %+v", p)
	}
}

// The text report: a summary line, a header, the top rows with their rate
// ("–" where no bytes are modelled), one line for the rest; the bench's
// summary carries it, and the JSON has the names the issue asks for.
func TestDecodeProfileLines(t *testing.T) {
	var steps [][]launchSample
	for range 3 {
		var s []launchSample
		for i, k := range []string{"moe/mgemv", "moe/moe_down", "gdn/gdn_rec_reg", "attention/attn_values_q8", "moe/route", "lm_head/advance"} {
			b := int64(0)
			if i < 4 {
				b = int64(10-i) << 20
			}
			s = append(s, launchSample{kernel: k, us: float64(60 - 10*i), bytes: b})
		}
		steps = append(steps, s)
	}
	p := aggregateDecodeProfile(steps, 3e12)
	p.Context, p.GraphUs, p.EagerUs = 514, 180, 260
	p.GraphOverSum = p.GraphUs / p.SumUs
	lines := p.Lines(4)
	if len(lines) != 2+4+1 {
		t.Fatalf("%d lines, want a summary, a header, 4 rows and the rest:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, tc := range []struct {
		line int
		want string
	}{
		{0, "gpu decode profile (3 steps at 514 tokens of context, each kernel alone between events): 6 launches a step, 210.0 µs summed against the graph's step 180.0 µs (graph ÷ sum 0.86) and 260.0 µs launched back to back; 34.0 MiB read (0.0 MiB of weights) → 170 GB/s, 6% of the 3000 GB/s copy"},
		{1, "kernel"},
		{2, "moe/mgemv                           1      60.0  28.6%     10.00     175      6%"},
		{3, "moe/moe_down                        1      50.0  23.8%      9.00     189      6%"},
		{5, "attention/attn_values_q8            1      30.0  14.3%      7.00     245      8%"},
		{6, "(2 more kernels)                    2      30.0  14.3%"},
	} {
		if !strings.Contains(lines[tc.line], tc.want) {
			t.Errorf("line %d = %q, want it to contain %q", tc.line, lines[tc.line], tc.want)
		}
	}
	if all := p.Lines(0); len(all) != 2+6 || !strings.Contains(all[6], "moe/route") || !strings.Contains(all[6], "0.00       –       –") {
		t.Errorf("every row, one without modelled bytes (its rate –):\n%s", strings.Join(all, "\n"))
	}
	noGraph := *p
	noGraph.GraphUs, noGraph.GraphOverSum = 0, 0
	if l := noGraph.Lines(4)[0]; !strings.Contains(l, "against no decode graph") {
		t.Errorf("host-planned summary %q", l)
	}
	if l := (&DecodeProfile{Error: "boom"}).Lines(12); len(l) != 1 || !strings.Contains(l[0], "failed: boom") {
		t.Errorf("failed profile %q", l)
	}
	info := &BenchInfo{Device: "NVIDIA H100", DecodeProfile: p}
	if got := strings.Join(info.Summary(), "\n"); !strings.Contains(got, "gpu decode profile (3 steps") || strings.Count(got, "\ngpu decode  ") != 1+6 {
		t.Errorf("the bench summary lacks the profile's table (a header, 6 rows):\n%s", got)
	}
	js, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"decode_profile":{`, `"kernels":[{"kernel":"moe/mgemv","launches":1,"us_per_step":60,"share":`, `"bytes_per_step":10485760,"gb_s":`, `"of_copy_bw":`, `"sum_us_per_step":210`, `"graph_over_sum":`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("JSON lacks %s: %s", key, js)
		}
	}
	if js, _ := json.Marshal(&BenchInfo{}); strings.Contains(string(js), "decode_profile") {
		t.Errorf("a report without the profile names it: %s", js)
	}
}

// On the device (the tiny MoE fixture, resident and streamed in 8 slots):
// the profile has a row for every launch of the decode graph (streamed,
// all but the read-ahead's on the side stream), a time for each, bytes for
// every product, weight bytes equal to the model's a token plus one
// embedding row; streamed, the slot kernels are rows; and the engine's
// greedy tokens afterwards are those before.
func TestDecodeProfileCoversTheStep(t *testing.T) {
	needGPU(t)
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	dir := install(t, "tiny-moe-fused", 4)
	for _, slots := range []int{0, 8} {
		v := ""
		if slots > 0 {
			v = strconv.Itoa(slots)
		}
		t.Setenv("NVMAI_GPU_SLOTS", v)
		e, err := runtime.Load(dir, runtime.Options{Threads: 4, Device: model.GPU})
		if err != nil {
			t.Fatal(err)
		}
		b := e.Model().(*Backend)
		streamed := b.StreamsExperts()
		if streamed != (slots > 0) {
			t.Fatalf("%d slots: streamed %v", slots, streamed)
		}
		before := greedy(t, e, ids, 17)
		info, err := b.Measure(16, 8)
		if err != nil {
			t.Fatal(err)
		}
		p := info.DecodeProfile
		switch {
		case p == nil:
			t.Fatalf("streamed %v: no decode profile", streamed)
		case p.Error != "":
			t.Fatalf("streamed %v: %s", streamed, p.Error)
		}
		for _, line := range p.Lines(0) {
			t.Logf("streamed %v: %s", streamed, line)
		}
		if p.Steps != decodeProfileSteps || p.Context != 16+2 || p.SumUs <= 0 || p.CopyBandwidth <= 0 || p.GraphOverSum <= 0 {
			t.Errorf("streamed %v: totals %+v", streamed, p)
		}
		if streamed && p.Launches > info.KernelsPerToken || !streamed && p.Launches != info.KernelsPerToken {
			t.Errorf("streamed %v: %d launches profiled, the graph has %d", streamed, p.Launches, info.KernelsPerToken)
		}
		if want := b.Model.TokenBytes + b.Model.embed.RowBytes(); p.WeightBytes != want {
			t.Errorf("streamed %v: %d weight bytes a step, want the model's %d a token and an embedding row: %d", streamed, p.WeightBytes, b.Model.TokenBytes, want)
		}
		var names []string
		for _, r := range p.Kernels {
			names = append(names, r.Kernel)
			kernel := r.Kernel[strings.Index(r.Kernel, "/")+1:]
			if r.UsPerStep <= 0 || r.Launches <= 0 {
				t.Errorf("streamed %v: row %+v", streamed, r)
			}
			if slices.Contains([]string{"mgemv", "qgemv", "fgemv", "moe_down", "embed"}, kernel) && (r.Bytes <= 0 || r.GBs <= 0 || r.OfCopyBW <= 0) {
				t.Errorf("streamed %v: a product without bytes or a rate: %+v", streamed, r)
			}
		}
		if streamed && !slices.Contains(names, "moe/slot_resolve") {
			t.Errorf("streamed: no slot_resolve row among %v", names)
		}
		if after := greedy(t, e, ids, 17); !slices.Equal(after, before) {
			t.Errorf("streamed %v: greedy tokens after the profile %v, before %v", streamed, after, before)
		}
		e.Close()
	}
}
