package server

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// tinyEngine loads the embedded tiny model at 8 bits.
func tinyEngine(t *testing.T) *runtime.Engine {
	t.Helper()
	return loadTiny(t, 8)
}

// loadTiny loads the embedded tiny model converted at bits (once per test
// run, shared by the tests, which only read it).
func loadTiny(t *testing.T, bits int) *runtime.Engine {
	t.Helper()
	e, err := runtime.Load(fixinstall.Install(t, testfix.Embedded(t), bits), runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func TestMain(m *testing.M) { fixinstall.Main(m) }

func collect(t *testing.T, r *RuntimeEngine, prompt []int, max int) (string, Outcome) {
	t.Helper()
	var text string
	out, err := r.Generate(context.Background(), Generation{Prompt: prompt, MaxTokens: max}, func(s string) bool { text += s; return true })
	if err != nil {
		t.Fatal(err)
	}
	return text, out
}

// A cancelled request leaves the engine usable, and resuming from any
// snapshot (boundary, end of prompt, end of reply) gives the greedy text
// of a cold run.
func TestRuntimeEngineResumesBitIdenticalAndSurvivesCancel(t *testing.T) {
	e := tinyEngine(t)
	warm := NewRuntimeEngine(e, RuntimeOptions{CacheBytes: 64 << 20, PrefillChunk: 8})
	cold := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 8})
	tok := e.Tokenizer
	turn1 := tok.Encode("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := warm.Generate(ctx, Generation{Prompt: turn1, MaxTokens: 8}, func(string) bool { return true }); err == nil {
		t.Fatal("a cancelled context did not stop the generation")
	}
	reply, out1 := collect(t, warm, turn1, 12)
	if out1.CachedTokens != 0 {
		t.Fatalf("first request reused %d tokens", out1.CachedTokens)
	}
	turn2 := append(slices.Clone(turn1), tok.Encode(reply+"<|im_end|>\n<|im_start|>user\nAnother.<|im_end|>\n<|im_start|>assistant\n")...)
	for i, prompt := range [][]int{turn2, turn2, turn1} {
		want, _ := collect(t, cold, prompt, 12)
		got, out := collect(t, warm, prompt, 12)
		if got != want {
			t.Fatalf("request %d: warm %q, cold %q", i, got, want)
		}
		if out.CachedTokens == 0 {
			t.Fatalf("request %d reused nothing", i)
		}
	}
	if st := warm.CacheStats(); st.Entries == 0 || st.Bytes > st.Budget {
		t.Fatalf("cache %+v", st)
	}
}

// loadEngine loads a second engine from e's install: what a restarted
// server holds.
func loadAgain(t *testing.T, e *runtime.Engine) *runtime.Engine {
	t.Helper()
	e2, err := runtime.Load(e.Install.Dir, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	return e2
}

func openDisk(t *testing.T, dir string) *promptcache.Disk {
	t.Helper()
	d, err := promptcache.OpenDisk(promptcache.DiskOptions{Dir: dir, Budget: 1 << 30, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// diskEngine is a server's engine over the cache directory dir, as a
// freshly started server builds it.
func diskEngine(t *testing.T, e *runtime.Engine, dir string, opt RuntimeOptions) (*RuntimeEngine, *promptcache.Disk) {
	t.Helper()
	d := openDisk(t, dir)
	opt.Disk, opt.CacheBytes, opt.PrefillChunk, opt.DiskMinTokens = d, 64<<20, 8, 8
	if opt.TemplateSHA256 == "" {
		opt.TemplateSHA256 = PlainChatMLSHA256()
	}
	return NewRuntimeEngine(e, opt), d
}

func entryFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "nvmai-pc-*.nvpc"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// The disk cache across restarts: a prompt sharing the first request's
// system prefix, sent to a new engine over the same directory, reports
// that prefix as cached and generates exactly what a cold engine does.
// After every entry is damaged (a flipped byte, a truncation), a restart
// misses, removes the files and still generates the same text. Another
// template, KV width or install never hits.
func TestRuntimeEngineDiskCacheSurvivesRestart(t *testing.T) {
	e := tinyEngine(t)
	tok := e.Tokenizer
	system := "<|im_start|>system\nYou are a coding agent. Tools: read_file(path), run(cmd), search(query).<|im_end|>\n"
	first := tok.Encode(system + "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
	second := tok.Encode(system + "<|im_start|>user\nList two files.<|im_end|>\n<|im_start|>assistant\n")
	prefix := len(tok.Encode(system))
	want, _ := collect(t, NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 8}), second, 12)

	dir := t.TempDir()
	r1, d1 := diskEngine(t, e, dir, RuntimeOptions{})
	if _, out := collect(t, r1, first, 12); out.CachedTokens != 0 {
		t.Fatalf("an empty directory gave %d cached tokens", out.CachedTokens)
	}
	d1.Close() // finishes the background writes
	if n := len(entryFiles(t, dir)); n < 2 {
		t.Fatalf("%d entries written, want the system prefix and the end of the prompt at least", n)
	}

	r2, d2 := diskEngine(t, loadAgain(t, e), dir, RuntimeOptions{})
	got, out := collect(t, r2, second, 12)
	if got != want || out.CachedTokens != prefix {
		t.Fatalf("after a restart: %q with %d cached tokens; want %q with the %d-token system prefix", got, out.CachedTokens, want, prefix)
	}
	if st := r2.DiskCacheStats(); st.Hits != 1 || st.Corrupt != 0 {
		t.Fatalf("disk stats %+v", st)
	}
	d2.Close()

	for name, opt := range map[string]RuntimeOptions{
		"another template": {TemplateSHA256: strings.Repeat("ab", 32)},
		"another KV width": {KVBits: 16},
	} {
		r, _ := diskEngine(t, e, dir, opt)
		if _, out := collect(t, r, second, 12); out.CachedTokens != 0 {
			t.Errorf("%s: %d cached tokens", name, out.CachedTokens)
		}
	}
	other := otherInstall(t)
	r, _ := diskEngine(t, other, dir, RuntimeOptions{})
	if _, out := collect(t, r, second, 12); out.CachedTokens != 0 {
		t.Errorf("another install: %d cached tokens", out.CachedTokens)
	}

	for _, damage := range []string{"flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			w, d := diskEngine(t, e, dir, RuntimeOptions{})
			collect(t, w, first, 12)
			d.Close()
			damaged := map[string][]byte{}
			for _, p := range entryFiles(t, dir) {
				raw, err := hurt(p, damage)
				if err != nil {
					t.Fatal(err)
				}
				damaged[p] = raw
			}
			r, d := diskEngine(t, loadAgain(t, e), dir, RuntimeOptions{})
			got, out := collect(t, r, second, 12)
			if got != want || out.CachedTokens != 0 {
				t.Fatalf("over damaged entries: %q with %d cached tokens; want %q recomputed", got, out.CachedTokens, want)
			}
			st := r.DiskCacheStats()
			if st.Corrupt == 0 {
				t.Errorf("no damaged entry noticed: %+v", st)
			}
			d.Close()
			// Every damaged entry that was read is gone (or written
			// again, intact); the others wait, unread, for their turn.
			still := 0
			for p, raw := range damaged {
				if now, err := os.ReadFile(p); err == nil && string(now) == string(raw) {
					still++
				}
			}
			if want := len(damaged) - int(st.Corrupt); still != want {
				t.Errorf("%d damaged files unchanged, want %d (%d of %d found damaged)", still, want, st.Corrupt, len(damaged))
			}
			r3, _ := diskEngine(t, loadAgain(t, e), dir, RuntimeOptions{})
			if got, out := collect(t, r3, second, 12); got != want || out.CachedTokens != len(second)-1 {
				t.Fatalf("after recomputing: %q with %d cached tokens, want %q with %d", got, out.CachedTokens, want, len(second)-1)
			}
		})
	}
}

// hurt damages an entry file: one payload byte flipped, or its last byte
// cut. It returns the damaged bytes.
func hurt(p, how string) ([]byte, error) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if how == "truncate" {
		raw = raw[:len(raw)-1]
	} else {
		raw[len(raw)/2] ^= 0x01
	}
	return raw, os.WriteFile(p, raw, 0o644)
}

// otherInstall converts the fixture at another width: another receipt.
func otherInstall(t *testing.T) *runtime.Engine {
	t.Helper()
	return loadTiny(t, 16)
}

// SnapshotGap drops the snapshot points closer than the gap to where the
// request resumed or to the point kept before them (the GPU engine's
// snapshot costs more than re-feeding a few tokens); 0 keeps them all.
func TestSnapshotPointsKeepTheGap(t *testing.T) {
	const S = 9 // <|im_start|>
	// Message starts at 2, 10 and 13; the prompt ends at 16.
	prompt := []int{1, 1, S, 1, 1, 1, 1, 1, 1, 1, S, 1, 1, S, 1, 1, 1}
	cases := []struct {
		from, gap int
		want      []int
	}{
		{0, 0, []int{10, 13, 16}},
		{0, 4, []int{10, 16}},
		{0, 11, []int{13}},
		{0, 17, nil},
		{11, 0, []int{13, 16}},
		{11, 3, []int{16}},
		{11, 2, []int{13, 16}},
		{16, 0, nil},
	}
	for _, c := range cases {
		r := &RuntimeEngine{opt: RuntimeOptions{Boundaries: 2, SnapshotGap: c.gap}, imStart: S}
		if got := r.snapshotPoints(prompt, c.from); !slices.Equal(got, c.want) {
			t.Errorf("from %d, gap %d: points %v, want %v", c.from, c.gap, got, c.want)
		}
	}
}

// With a gap, a second turn still resumes (from the end of the first
// reply, always kept) and generates what a cold engine does.
func TestRuntimeEngineWithAGapResumesBitIdentical(t *testing.T) {
	e := tinyEngine(t)
	warm := NewRuntimeEngine(e, RuntimeOptions{CacheBytes: 64 << 20, PrefillChunk: 8, SnapshotGap: 64})
	cold := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 8})
	tok := e.Tokenizer
	turn1 := tok.Encode("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
	reply, _ := collect(t, warm, turn1, 12)
	if st := warm.CacheStats(); st.Entries != 1 {
		t.Fatalf("a %d-token prompt under a 64-token gap left %d snapshots, want the end of the reply only", len(turn1), st.Entries)
	}
	turn2 := append(slices.Clone(turn1), tok.Encode(reply+"<|im_end|>\n<|im_start|>user\nAnother.<|im_end|>\n<|im_start|>assistant\n")...)
	collect(t, warm, tok.Encode("<|im_start|>user\nSomething else.<|im_end|>\n<|im_start|>assistant\n"), 4) // the live session moves on
	want, _ := collect(t, cold, turn2, 12)
	got, out := collect(t, warm, turn2, 12)
	if got != want || out.CachedTokens == 0 {
		t.Fatalf("second turn %q reusing %d tokens, cold %q", got, out.CachedTokens, want)
	}
}
