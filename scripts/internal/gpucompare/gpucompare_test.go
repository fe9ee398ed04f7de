package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// ggufBuilder writes GGUF v3 headers for the tests (no tensor data: the
// estimate never reads it).
type ggufBuilder struct {
	kv      bytes.Buffer
	nkv     int
	tensors bytes.Buffer
	nt      int
}

func putStr(b *bytes.Buffer, s string) {
	binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

func (g *ggufBuilder) u32(key string, v uint32) {
	putStr(&g.kv, key)
	binary.Write(&g.kv, binary.LittleEndian, uint32(4))
	binary.Write(&g.kv, binary.LittleEndian, v)
	g.nkv++
}

func (g *ggufBuilder) str(key, v string) {
	putStr(&g.kv, key)
	binary.Write(&g.kv, binary.LittleEndian, uint32(8))
	putStr(&g.kv, v)
	g.nkv++
}

func (g *ggufBuilder) f32(key string, v float32) {
	putStr(&g.kv, key)
	binary.Write(&g.kv, binary.LittleEndian, uint32(6))
	binary.Write(&g.kv, binary.LittleEndian, v)
	g.nkv++
}

func (g *ggufBuilder) i32s(key string, v []int32) {
	putStr(&g.kv, key)
	binary.Write(&g.kv, binary.LittleEndian, uint32(9))
	binary.Write(&g.kv, binary.LittleEndian, uint32(5))
	binary.Write(&g.kv, binary.LittleEndian, uint64(len(v)))
	binary.Write(&g.kv, binary.LittleEndian, v)
	g.nkv++
}

func (g *ggufBuilder) tensor(name string, typ uint32, dims ...uint64) {
	putStr(&g.tensors, name)
	binary.Write(&g.tensors, binary.LittleEndian, uint32(len(dims)))
	binary.Write(&g.tensors, binary.LittleEndian, dims)
	binary.Write(&g.tensors, binary.LittleEndian, typ)
	binary.Write(&g.tensors, binary.LittleEndian, uint64(0))
	g.nt++
}

func (g *ggufBuilder) bytes() []byte {
	var b bytes.Buffer
	b.WriteString("GGUF")
	binary.Write(&b, binary.LittleEndian, uint32(3))
	binary.Write(&b, binary.LittleEndian, uint64(g.nt))
	binary.Write(&b, binary.LittleEndian, uint64(g.nkv))
	b.Write(g.kv.Bytes())
	b.Write(g.tensors.Bytes())
	return b.Bytes()
}

// smallMoE is a one-layer qwen35moe header: 8 of 256 experts, a 1,000-row
// vocabulary, metadata of every kind the reader must skip.
func smallMoE(output bool) *ggufBuilder {
	g := &ggufBuilder{}
	g.str("general.architecture", "qwen35moe")
	g.f32("qwen35moe.rope.freq_base", 1e7)
	g.i32s("qwen35moe.rope.dimension_sections", []int32{11, 11, 10, 0})
	g.u32("qwen35moe.expert_count", 256)
	g.u32("qwen35moe.expert_used_count", 8)
	g.tensor("token_embd.weight", 8, 2048, 1000)        // q8_0: 2048/32*34 = 2176 bytes a row
	g.tensor("blk.0.attn_norm.weight", 0, 2048)         // f32: 8192
	g.tensor("blk.0.ffn_gate_inp.weight", 0, 2048, 256) // f32: 2 MiB
	g.tensor("blk.0.ffn_up_exps.weight", 2, 2048, 512, 256)
	g.tensor("blk.0.ffn_down_shexp.weight", 2, 512, 2048) // q4_0, read whole
	if output {
		g.tensor("output.weight", 8, 2048, 1000)
	}
	return g
}

func TestDecodeBytesPerToken(t *testing.T) {
	const (
		row    = 2048 / 32 * 34
		embd   = row * 1000
		norm   = 2048 * 4
		router = 2048 * 256 * 4
		exps   = 2048 * 512 * 256 / 32 * 18
		shexp  = 512 * 2048 / 32 * 18
	)
	cases := []struct {
		name string
		data []byte
		want int64
		err  string
	}{
		{"one embedding row and 8 of 256 experts", smallMoE(true).bytes(), row + norm + router + exps*8/256 + shexp + embd, ""},
		{"tied head reads the whole embedding", smallMoE(false).bytes(), embd + norm + router + exps*8/256 + shexp, ""},
		{"bad magic", []byte("GGUX\x03\x00\x00\x00"), 0, `magic "GGUX"`},
		{"truncated", smallMoE(true).bytes()[:100], 0, "truncated header"},
		{"unknown type", func() []byte {
			g := smallMoE(true)
			g.tensor("blk.0.odd.weight", 99, 32)
			return g.bytes()
		}(), 0, `tensor "blk.0.odd.weight" has ggml type 99`},
		{"experts without counts", func() []byte {
			g := &ggufBuilder{}
			g.tensor("blk.0.ffn_up_exps.weight", 2, 2048, 512, 256)
			return g.bytes()
		}(), 0, "expert_used_count"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := parseGGUFHeader(bytes.NewReader(c.data))
			var got int64
			if err == nil {
				got, err = h.decodeBytesPerToken()
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("bytes per token %d, want %d", got, c.want)
			}
		})
	}
}

func TestReadGGUFHeaderNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "short.gguf")
	os.WriteFile(p, []byte("GGUF"), 0o644)
	_, err := readGGUFHeader(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v, want one naming %s", err, p)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLlamaRecords(t *testing.T) {
	recs, err := llamaRecords(readTestdata(t, "llama-decode-4bit-r1.json"), Record{Width: 4, Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	r := recs[1]
	if r.Engine != engineLlama || r.Test != "decode" || r.Tokens != 128 || r.Depth != 16384 || r.FlashAttn == nil || *r.FlashAttn || len(r.TokS) != 3 || r.Width != 4 {
		t.Fatalf("record %+v", r)
	}
	if !*recs[2].FlashAttn {
		t.Fatal("the third test ran with -fa 1")
	}
	bad := []struct{ name, data, err string }{
		{"not JSON", "| model | size |", "not its -o json array"},
		{"empty", "[]", "no tests"},
		{"prompt and generation together", `[{"n_prompt":512,"n_gen":128,"flash_attn":0,"samples_ts":[1]}]`, "run prompt and generation tests apart"},
		{"flash attention auto", `[{"n_prompt":512,"n_gen":0,"flash_attn":-1,"samples_ts":[1]}]`, "pass -fa 0,1"},
		{"no samples", `[{"n_prompt":512,"n_gen":0,"flash_attn":0}]`, "no samples_ts"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := llamaRecords([]byte(c.data), Record{})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

func TestNvmaiRecords(t *testing.T) {
	recs, err := nvmaiRecords(readTestdata(t, "nvmai-4bit-p16384-r1.json"), Record{Width: 4, Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	pf, dc := recs[0], recs[1]
	if pf.Test != "prefill" || pf.Tokens != 16384 || pf.Depth != 0 || len(pf.TokS) != 3 {
		t.Fatalf("prefill record %+v", pf)
	}
	if dc.Test != "decode" || dc.Tokens != 128 || dc.Depth != 16384 || dc.WeightBytes != 1711276032 || dc.CopyBandwidth != 2.998e12 {
		t.Fatalf("decode record %+v", dc)
	}
	bad := []struct{ name, data, err string }{
		{"not JSON", "bench: no model", "not its --json report"},
		{"no runs", `{"runs":[]}`, "no runs"},
		{"CPU engine", `{"engine":"nvmai/avx2","runs":[{"prompt_tokens":512,"generated_tokens":128}]}`, "--engine gpu"},
		{"device error", `{"runs":[{"prompt_tokens":512,"generated_tokens":128}],"gpu":{"error":"out of memory"}}`, "out of memory"},
		{"prompts of other lengths", `{"runs":[{"prompt_tokens":512,"generated_tokens":128},{"prompt_tokens":30,"generated_tokens":128}],"gpu":{}}`, "--prompt-tokens"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := nvmaiRecords([]byte(c.data), Record{})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

// cannedRuns is what two rounds at 4 bits and one at 8 bits (fewer layers,
// llama.cpp's decode run failed) write to runs.jsonl.
func cannedRuns(t *testing.T) []Record {
	t.Helper()
	var recs []Record
	base := Record{Card: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", Date: "2026-12-07T18:30:00Z", Commit: "abc1234",
		Llama: "v0.5.0 (de3ff81)", Width: 4, Layers: 40}
	for r := 1; r <= 2; r++ {
		m := base
		m.Round = r
		m.First = map[bool]string{true: engineNvmai, false: engineLlama}[r%2 == 1]
		for _, p := range []int{512, 4096, 16384} {
			got, err := nvmaiRecords(readTestdata(t, fmt.Sprintf("nvmai-4bit-p%d-r%d.json", p, r)), m)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, got...)
		}
		ll := m
		ll.WeightBytes = 1752190976
		for _, f := range []string{"prefill", "decode"} {
			got, err := llamaRecords(readTestdata(t, fmt.Sprintf("llama-%s-4bit-r%d.json", f, r)), ll)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, got...)
		}
	}
	m8 := base
	m8.Width, m8.Layers, m8.Round, m8.First = 8, 24, 1, engineNvmai
	m8.Note = "24 layers, not 40: the 40-layer pair (69 GiB) fits neither the disk nor /dev/shm; figures are for the 24-layer models, not scaled."
	got, err := nvmaiRecords(readTestdata(t, "nvmai-4bit-p512-r1.json"), m8)
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, got...)
	ll8 := m8
	ll8.WeightBytes = 1952190976
	pf, err := llamaRecords(readTestdata(t, "llama-prefill-4bit-r1.json"), ll8)
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, pf[0], pf[2])
	f := ll8
	f.Engine, f.Test, f.Tokens, f.Depth, f.Failed = engineLlama, "decode", 128, 512, "exit 1: CUDA error: out of memory"
	recs = append(recs, f)
	return recs
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (go test -update rewrites it); got:\n%s", p, got)
	}
}

func TestTableGolden(t *testing.T) {
	recs := cannedRuns(t)
	golden(t, "table.golden.md", table(recs))
	golden(t, "summary.golden.md", summary(recs)+"\n")
}

func TestRecordsRoundTrip(t *testing.T) {
	recs := cannedRuns(t)
	var b bytes.Buffer
	for _, r := range recs {
		line, _ := jsonLine(r)
		b.Write(line)
	}
	back, err := parseRecords(&b, "runs.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if table(back) != table(recs) {
		t.Fatal("the table from runs.jsonl differs from the table from the records")
	}
	if _, err := parseRecords(strings.NewReader("{\"engine\":\"nvmai\"}\n{oops\n"), "runs.jsonl"); err == nil || !strings.Contains(err.Error(), "runs.jsonl:2") {
		t.Fatalf("error %v, want one naming runs.jsonl:2", err)
	}
	if _, err := parseRecords(strings.NewReader(`{"engine":"vllm"}`), "runs.jsonl"); err == nil || !strings.Contains(err.Error(), `engine "vllm"`) {
		t.Fatalf("error %v, want one naming the engine", err)
	}
}

func TestMedianAndThousands(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{4, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		d    int
		want string
	}{{5905.2, 0, "5,905"}, {244.04, 1, "244.0"}, {1234567.5, 1, "1,234,567.5"}, {999.96, 0, "1,000"}, {-1500, 0, "-1,500"}} {
		if got := thousands(c.v, c.d); got != c.want {
			t.Errorf("thousands(%v, %d) = %q, want %q", c.v, c.d, got, c.want)
		}
	}
}

func TestApply(t *testing.T) {
	recs := cannedRuns(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "gpu.md")
	readme := filepath.Join(dir, "README.md")
	os.WriteFile(doc, []byte("# GPU\n\n## nvmai beside llama.cpp's CUDA backend\n\ntext\n"+markStart+"\nold table\n"+markEnd+"\nafter\n"), 0o644)
	os.WriteFile(readme, []byte("intro\n"+markStart+"\nold line\n"+markEnd+"\n"), 0o644)
	if err := apply(recs, []string{doc, readme}); err != nil {
		t.Fatal(err)
	}
	d, _ := os.ReadFile(doc)
	if want := "text\n" + markStart + "\n" + table(recs) + markEnd + "\nafter\n"; !strings.HasSuffix(string(d), want) {
		t.Fatalf("gpu.md:\n%s", d)
	}
	r, _ := os.ReadFile(readme)
	if want := "intro\n" + markStart + "\n" + summary(recs) + "\n" + markEnd + "\n"; string(r) != want {
		t.Fatalf("README.md:\n%s", r)
	}
	if err := apply(recs, []string{doc, readme}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(doc); string(again) != string(d) {
		t.Fatal("a second apply changed gpu.md")
	}
	bare := filepath.Join(dir, "bare.md")
	os.WriteFile(bare, []byte("no markers\n"), 0o644)
	if err := apply(recs, []string{bare}); err == nil || !strings.Contains(err.Error(), bare) || !strings.Contains(err.Error(), markStart) {
		t.Fatalf("error %v, want one naming %s and the marker", err, bare)
	}
	if b, _ := os.ReadFile(bare); string(b) != "no markers\n" {
		t.Fatal("a failed apply changed the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("%d files in the directory, want 3 (no temporary file left)", len(entries))
	}
}

func TestRunCommands(t *testing.T) {
	dir := t.TempDir()
	gguf := filepath.Join(dir, "m.gguf")
	os.WriteFile(gguf, smallMoE(true).bytes(), 0o644)
	cases := []struct {
		args []string
		err  string
	}{
		{[]string{"gguf-bytes", gguf}, ""},
		{[]string{"llama", "--width", "4", "--round", "1", filepath.Join("testdata", "llama-prefill-4bit-r1.json")}, ""},
		{[]string{"nvmai", "--width", "4", filepath.Join("testdata", "nvmai-4bit-p512-r1.json")}, ""},
		{[]string{"failed", "--engine", "nvmai", "--test", "decode", "--tokens", "128", "--depth", "512", "--why", "exit 2"}, ""},
		{[]string{"failed", "--engine", "nvmai", "--test", "decode"}, "--why given"},
		{[]string{"nvmai", filepath.Join("testdata", "llama-prefill-4bit-r1.json")}, "llama-prefill-4bit-r1.json"},
		{[]string{"bogus"}, "usage"},
		{nil, "usage"},
	}
	stdout := os.Stdout
	defer func() { os.Stdout = stdout }()
	for _, c := range cases {
		os.Stdout, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		err := run(c.args)
		os.Stdout.Close()
		os.Stdout = stdout
		if c.err == "" && err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.err)
		}
	}
}

// testdata/tiny.gguf is smallMoE's header: the GGUF the stub ggufsynth of
// selftest.sh writes, so the script's own gguf-bytes call reads a real one.
func TestTinyGGUFFixture(t *testing.T) {
	golden(t, "tiny.gguf", string(smallMoE(true).bytes()))
	h, err := readGGUFHeader(filepath.Join("testdata", "tiny.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.decodeBytesPerToken(); err != nil || n <= 0 {
		t.Fatalf("bytes per token %d, %v", n, err)
	}
}
