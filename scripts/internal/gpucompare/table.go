package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// group is one table block: the measurements of one width on one card.
type group struct {
	card          string
	width, layers int
	recs          []Record
}

// rowKey is one row of a block: a prefill of Tokens, or decode after Depth.
type rowKey struct {
	test string
	n    int // prompt tokens for prefill, context depth for decode
}

func keyOf(r Record) rowKey {
	if r.Test == "decode" {
		return rowKey{"decode", r.Depth}
	}
	return rowKey{r.Test, r.Tokens}
}

func (k rowKey) label(decodeTokens int) string {
	if k.test == "decode" {
		return fmt.Sprintf("decode %d after %s tok/s", decodeTokens, thousands(float64(k.n), 0))
	}
	return fmt.Sprintf("prefill %s tok/s", thousands(float64(k.n), 0))
}

func groups(recs []Record) []*group {
	var out []*group
	for _, r := range recs {
		i := slices.IndexFunc(out, func(g *group) bool { return g.card == r.Card && g.width == r.Width && g.layers == r.Layers })
		if i < 0 {
			out = append(out, &group{card: r.Card, width: r.Width, layers: r.Layers})
			i = len(out) - 1
		}
		out[i].recs = append(out[i].recs, r)
	}
	return out
}

// column is one engine setting of the table.
type column struct {
	engine string
	fa     *bool // llama.cpp's flash attention; nil for nvmai
}

var (
	faOff, faOn = false, true
	columns     = []column{{engineNvmai, nil}, {engineLlama, &faOff}, {engineLlama, &faOn}}
)

func (c column) matches(r Record, failed bool) bool {
	if r.Engine != c.engine {
		return false
	}
	if c.fa == nil || r.FlashAttn == nil {
		return c.fa == nil || failed // a failed llama-bench run stands for both settings
	}
	return *r.FlashAttn == *c.fa
}

// samples gathers every sample of column c in row k, and why its runs
// failed when none succeeded.
func (g *group) samples(c column, k rowKey) (vals []float64, fails []string) {
	for _, r := range g.recs {
		if keyOf(r) != k || !c.matches(r, r.Failed != "") {
			continue
		}
		if r.Failed != "" {
			if !slices.Contains(fails, r.Failed) {
				fails = append(fails, r.Failed)
			}
			continue
		}
		vals = append(vals, r.TokS...)
	}
	return vals, fails
}

// rows are the block's rows: every test llama.cpp ran (or was to run), or
// nvmai's when llama.cpp has none; prefill first, shortest first.
func (g *group) rows() []rowKey {
	var keys []rowKey
	for _, eng := range []string{engineLlama, engineNvmai} {
		for _, r := range g.recs {
			if r.Engine == eng && !slices.Contains(keys, keyOf(r)) {
				keys = append(keys, keyOf(r))
			}
		}
		if len(keys) > 0 {
			break
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].test != keys[j].test {
			return keys[i].test == "prefill"
		}
		return keys[i].n < keys[j].n
	})
	return keys
}

// median of a non-empty slice (it sorts a copy).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// thousands formats v with d decimals and commas between thousands.
func thousands(v float64, d int) string {
	s := strconv.FormatFloat(v, 'f', d, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func decimals(m float64) int {
	if m >= 1000 {
		return 0
	}
	return 1
}

func cell(vals []float64, fails []string) string {
	if len(vals) == 0 {
		if len(fails) > 0 {
			return "failed: " + strings.Join(fails, "; ")
		}
		return "not run"
	}
	m := median(vals)
	d := decimals(m)
	return fmt.Sprintf("%s [%s–%s]", thousands(m, d), thousands(slices.Min(vals), d), thousands(slices.Max(vals), d))
}

// bytesPerToken is the median of the engine's weight bytes per decode step.
func (g *group) bytesPerToken(engine string) float64 {
	var v []float64
	for _, r := range g.recs {
		if r.Engine == engine && r.Failed == "" && r.WeightBytes > 0 {
			v = append(v, float64(r.WeightBytes))
		}
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

// copyBandwidth is the median device-to-device copy rate nvmai-run bench
// measured in this block's runs.
func (g *group) copyBandwidth() float64 {
	var v []float64
	for _, r := range g.recs {
		if r.CopyBandwidth > 0 {
			v = append(v, r.CopyBandwidth)
		}
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

func (g *group) rounds() int {
	n := 0
	for _, r := range g.recs {
		n = max(n, r.Round)
	}
	return n
}

func (g *group) decodeTokens() int {
	for _, r := range g.recs {
		if r.Test == "decode" && r.Tokens > 0 {
			return r.Tokens
		}
	}
	return 128
}

// table renders runs.jsonl's records as the caption, one markdown table and
// its notes.
func table(recs []Record) string {
	if len(recs) == 0 {
		return "No runs yet.\n"
	}
	var b strings.Builder
	gs := groups(recs)
	b.WriteString(caption(recs, gs))
	b.WriteString("\n| card, width | measure | nvmai `--engine gpu` | llama.cpp FA off | llama.cpp FA on | nvmai ÷ llama.cpp (FA off / on) | ms/token ÷ HBM bound (nvmai / FA off / FA on) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	cards := map[string]bool{}
	for _, g := range gs {
		cards[g.card] = true
	}
	for _, g := range gs {
		label := fmt.Sprintf("%d-bit, %d layers", g.width, g.layers)
		if len(cards) > 1 {
			label = g.card + ", " + label
		}
		copyBW := g.copyBandwidth()
		for _, k := range g.rows() {
			var meds [3]float64
			cells := make([]string, 3)
			for i, c := range columns {
				vals, fails := g.samples(c, k)
				cells[i] = cell(vals, fails)
				if len(vals) > 0 {
					meds[i] = median(vals)
				}
			}
			ratio := func(i int) string {
				if meds[0] == 0 || meds[i] == 0 {
					return "–"
				}
				return fmt.Sprintf("%.2f×", meds[0]/meds[i])
			}
			hbm := "–"
			if k.test == "decode" && copyBW > 0 {
				parts := make([]string, 3)
				for i, c := range columns {
					bytes := g.bytesPerToken(c.engine)
					if meds[i] == 0 || bytes == 0 {
						parts[i] = "–"
						continue
					}
					// ms per token over bytes ÷ bandwidth in ms: the bandwidth over rate × bytes.
					parts[i] = fmt.Sprintf("%.1f×", copyBW/(meds[i]*bytes))
				}
				hbm = strings.Join(parts, " / ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s / %s | %s |\n", label, k.label(g.decodeTokens()),
				cells[0], cells[1], cells[2], ratio(1), ratio(2), hbm)
		}
	}
	for _, g := range gs {
		var notes []string
		for _, r := range g.recs {
			if r.Note != "" && !slices.Contains(notes, r.Note) {
				notes = append(notes, r.Note)
			}
		}
		for _, n := range notes {
			fmt.Fprintf(&b, "\n%d-bit: %s\n", g.width, n)
		}
	}
	return b.String()
}

// caption says where, when and how the table was measured.
func caption(recs []Record, gs []*group) string {
	var cards, drivers, commits, llamas, dates []string
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, r := range recs {
		add(&cards, r.Card)
		add(&drivers, r.Driver)
		add(&commits, r.Commit)
		add(&llamas, r.Llama)
		if len(r.Date) >= 10 {
			add(&dates, r.Date[:10])
		}
	}
	var rounds []string
	same := true
	for _, g := range gs {
		rounds = append(rounds, fmt.Sprintf("%d-bit %d", g.width, g.rounds()))
		same = same && g.rounds() == gs[0].rounds()
	}
	roundText := plural(gs[0].rounds(), "interleaved round")
	if !same {
		roundText = "interleaved rounds (" + strings.Join(rounds, ", ") + ")"
	}
	slices.Sort(dates)
	when := strings.Join(dates, ", ")
	if len(dates) > 2 {
		when = dates[0] + " to " + dates[len(dates)-1]
	}
	var bw []string
	for _, g := range gs {
		if c := g.copyBandwidth(); c > 0 {
			bw = append(bw, fmt.Sprintf("%d-bit calls %s GB/s", g.width, thousands(c/1e9, 0)))
		}
	}
	var bytes []string
	for _, g := range gs {
		nv, ll := g.bytesPerToken(engineNvmai), g.bytesPerToken(engineLlama)
		if nv > 0 || ll > 0 {
			bytes = append(bytes, fmt.Sprintf("%d-bit: nvmai %s, GGUF %s", g.width, mib(nv), mib(ll)))
		}
	}
	or := func(list []string, none string) string {
		if len(list) == 0 {
			return none
		}
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("Measured by `scripts/vs-llamacpp-gpu.sh` on %s (driver %s), %s; nvmai commit %s; llama.cpp %s, CUDA backend built on the card. "+
		"Synthetic Qwen3.5-35B-A3B (random weights, the same geometry in both engines), batch 1; nvmai's 4-bit install beside Q4_0 with token_embd and output at Q8_0, its 8-bit beside Q8_0. "+
		"Median [range] of every sample of %s, the engine going first alternating (nvmai: its three bench prompts per run; llama-bench: -r 3). "+
		"HBM bound: weight bytes read per decode step (%s) ÷ the device-to-device copy rate `nvmai-run bench` measured in the same call, bytes read + written (%s); "+
		"the KV cache a decode at depth also reads is not counted in it.\n",
		or(cards, "an unnamed card"), or(drivers, "?"), or([]string{when}, "undated"), or(commits, "?"), or(llamas, "?"), roundText, or(bytes, "not known"), or(bw, "not measured"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// mib is a byte count in MiB, or "not known" for none.
func mib(b float64) string {
	if b <= 0 {
		return "not known"
	}
	return thousands(b/(1<<20), 0) + " MiB"
}
