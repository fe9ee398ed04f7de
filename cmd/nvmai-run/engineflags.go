package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	nvmodel "github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"

	// The GPU engine registers itself (model.GPU) for --engine gpu; the
	// CPU architectures come with package runtime.
	_ "github.com/nvmai/nvmai/pkg/gpu"
	_ "github.com/nvmai/nvmai/pkg/gpu/qwen38gpu" // qwen4_exp on the GPU
)

// Ceilings of the numeric flags: far beyond any model, low enough that a
// typo cannot ask for terabytes of KV cache.
const (
	maxContextCeiling = 1 << 24 // tokens
	maxSlotsCeiling   = 1 << 16 // experts per layer
	maxPrefetch       = 64      // experts per layer
	maxSpinMicros     = 1_000_000
	poolSpinEnv       = "NVMAI_POOL_SPIN_US"
)

// engineFlags load a model and size its expert cache: every nvmai-run
// command that runs a model takes them (generate, chat, bench, serve …),
// and loadEngine checks and applies them.
func engineFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "install `DIR` (from nvmai-convert or nvmai-install)"},
		&cli.StringFlag{Name: "engine", Value: "cpu", Usage: "where the model runs: cpu, or gpu (an NVIDIA GPU holding every weight; needs the driver and NVRTC)"},
		cliutil.ThreadsFlag("compute threads (at most the cores; greedy output is the same for any count)", "t"),
		&cli.StringFlag{Name: "vram-budget", Value: "auto", Usage: "with --engine gpu: device memory for the model, e.g. 12G, or auto (the free VRAM less max(512M, 5%)); routed experts that do not fit stream into VRAM slots from pinned RAM, or from a RAM tier read from disk when RAM cannot hold them (docs/gpu.md)"},
		&cli.StringFlag{Name: "ram-budget", Usage: "memory for cached experts, e.g. 8G or 512M (binary units); with --engine gpu, the RAM behind the VRAM slots of streamed experts: below every expert, a RAM tier read from disk (docs/gpu.md)", DefaultText: "8G, at most half the RAM"},
		cliutil.IntRange(&cli.IntFlag{Name: "expert-cache-slots", Usage: "experts cached per layer, instead of --ram-budget"}, 1, maxSlotsCeiling, ""),
		cliutil.IntRange(&cli.IntFlag{Name: "io-threads", Usage: "parallel expert reads", DefaultText: "4"}, 1, expertcache.MaxIOThreads, ""),
		cliutil.IntRange(&cli.IntFlag{Name: "prefetch", Usage: "experts per layer to predict and read ahead while decoding (at most top_k); 0 = off. Only when the cache cannot hold every expert", DefaultText: "4"}, 0, maxPrefetch, "0 = off"),
		&cli.BoolFlag{Name: "warm-reads", Value: true, Usage: "in a long prefill pass, read the next layer's missing experts into its empty slots while this layer finishes (docs/prefill.md); --warm-reads=false for A/B runs, output is the same"},
		&cli.IntFlag{Name: "kv-bits", Value: 8, Usage: "KV cache width: 8 (int8, a scale per 64 values), 16 (bfloat16) or 32 (float32)"},
		&cli.StringFlag{Name: "rope-scaling", Value: "none", Usage: "none, or yarn to extend the context 2x or 4x (--max-context 524288 or 1048576 for Qwen3.5/3.6)"},
		&cli.BoolFlag{Name: "force", Usage: "start even when the memory footprint exceeds the machine's RAM"},
	}
}

// sessionFlags size a session's context; sessionOptions applies them.
func sessionFlags() []cli.Flag {
	return []cli.Flag{
		cliutil.IntRange(&cli.IntFlag{Name: "kv-initial", Usage: "initial KV cache size in tokens; doubles on demand", DefaultText: "8192"}, 1, maxContextCeiling, ""),
		cliutil.IntRange(&cli.IntFlag{Name: "max-context", Usage: "most tokens of context", DefaultText: "the model's maximum"}, 1, maxContextCeiling, ""),
	}
}

// samplingFlags choose tokens and when to stop; generateOptions applies them.
func samplingFlags() []cli.Flag {
	return []cli.Flag{
		cliutil.IntRange(&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 256, Usage: "most tokens to generate"}, 1, maxContextCeiling, ""),
		&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature, 0 = greedy", DefaultText: "generation_config.json"},
		&cli.IntFlag{Name: "top-k", Usage: "keep the K most likely tokens, 0 = off", DefaultText: "generation_config.json"},
		&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling mass, 1 = off", DefaultText: "generation_config.json"},
		&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "random seed; the same seed gives the same text"},
		&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at end-of-sequence tokens"},
	}
}

// serveRefusedFlags are the run flags serve shows (they come with
// modelFlags) but cannot apply, each with what to use instead: refused
// rather than silently ignored (#44 S17).
var serveRefusedFlags = map[string]string{
	"ignore-eos":       "the server always stops at the model's end of sequence; a request's max_tokens bounds its length (nvmai-run bench measures fixed lengths)",
	"system":           "the server takes the system prompt from each request (a system or developer message, Anthropic's system, Responses' instructions)",
	"reasoning-effort": "each request sets its own (reasoning_effort, output_config.effort, reasoning.effort); --thinking on|off sets the server's default for thinking",
	"stats":            "each request's log line has its token counts and speeds (--log-json for JSON)",
}

// serveDefaults turns the sampling flags serve applies (--max-tokens,
// --temperature, --top-k, --top-p, --seed, as llama-server's -n, --temp,
// --top-k, --top-p and --seed) into the server's defaults, and refuses the
// run flags it cannot apply.
func serveDefaults(c *cli.Context) (server.Defaults, error) {
	var d server.Defaults
	for _, name := range slices.Sorted(maps.Keys(serveRefusedFlags)) {
		if c.IsSet(name) {
			return d, cliutil.Usagef("serve does not take --%s: %s", name, serveRefusedFlags[name])
		}
	}
	if c.IsSet("max-tokens") {
		d.MaxTokens = c.Int("max-tokens")
	}
	if c.IsSet("temperature") {
		v := c.Float64("temperature")
		d.Temperature = &v
	}
	if c.IsSet("top-k") {
		v := c.Int("top-k")
		d.TopK = &v
	}
	if c.IsSet("top-p") {
		v := c.Float64("top-p")
		d.TopP = &v
	}
	if c.IsSet("seed") {
		v := c.Uint64("seed")
		if v == 0 {
			return d, cliutil.Usagef("--seed 0: give serve a seed of at least 1 (without --seed, each request that gives no seed draws a random one)")
		}
		d.Seed = &v
	}
	if err := d.Validate(); err != nil {
		// "top_k -3 must be ≥ 0 …" names the request field; say the flag.
		field, rest, _ := strings.Cut(strings.TrimPrefix(err.Error(), "sample: "), " ")
		return d, cliutil.Usagef("--%s %s", strings.ReplaceAll(field, "_", "-"), rest)
	}
	return d, nil
}

// engineDevice is --engine as a registered device name ("" is the CPU).
func engineDevice(c *cli.Context) string {
	return cmp.Or(strings.ToLower(c.String("engine")), nvmodel.CPU)
}

// loadEngine checks the engine flags (engineOptions) and loads the model.
func loadEngine(c *cli.Context) (*runtime.Engine, error) {
	dir, opt, err := engineOptions(c)
	if err != nil {
		return nil, err
	}
	e, err := runtime.Load(dir, opt)
	if err != nil {
		return nil, err
	}
	if err := reportFootprint(c, e, opt.Experts.Budget); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// engineOptions turns the engine flags into load options. Every mistake is
// a usage error (exit 2), including those that need the model's manifest
// (a budget or slot count too small for it), which is read here, before
// the load, so they are told apart from a broken install.
func engineOptions(c *cli.Context) (string, runtime.Options, error) {
	dir := c.String("model")
	if dir == "" {
		return "", runtime.Options{}, cliutil.Usagef("--model DIR is required (an install made by nvmai-convert or nvmai-install)")
	}
	opt, err := loadOptions(c, dir)
	return dir, opt, err
}

// loadOptions checks the engine flags for the install in dir ("": for
// whichever install, checked against none's manifest).
func loadOptions(c *cli.Context, dir string) (runtime.Options, error) {
	if err := cliutil.Exclusive(c, "expert-cache-slots", "ram-budget"); err != nil {
		return runtime.Options{}, err
	}
	if err := checkKVFlags(c); err != nil {
		return runtime.Options{}, err
	}
	if _, _, err := cliutil.EnvInt(poolSpinEnv, 0, maxSpinMicros, "microseconds a compute thread spins before parking; 0 parks at once"); err != nil {
		return runtime.Options{}, err
	}
	x := runtime.ExpertOptions{Slots: c.Int("expert-cache-slots"), IOThreads: c.Int("io-threads"), Prefetch: prefetchFlag(c), NoWarm: !c.Bool("warm-reads")}
	if c.IsSet("ram-budget") {
		b, err := expertcache.ParseSize(c.String("ram-budget"))
		if err != nil {
			return runtime.Options{}, cliutil.Usagef("--ram-budget: %v", err)
		}
		if b == 0 {
			return runtime.Options{}, cliutil.Usagef("--ram-budget 0 holds no experts; give a size such as 8G or 512M")
		}
		x.Budget = b
	}
	if dir != "" {
		if m, _, err := packexperts.ReadManifest(dir); err == nil {
			if r := m.Geometry.RopeScaling; r != nil && c.String("rope-scaling") != "none" {
				return runtime.Options{}, cliutil.Usagef("--rope-scaling %s: this model's config.json already sets %s RoPE scaling (factor %v over %d positions), which applies without a flag; drop --rope-scaling", c.String("rope-scaling"), r.Type, r.Factor, r.OriginalMaxPositionEmbeddings)
			}
			if m.Experts != nil {
				if err := checkExpertFlags(c, m, x); err != nil {
					return runtime.Options{}, err
				}
			}
		}
	}
	if devices := nvmodel.Devices(); !slices.Contains(devices, engineDevice(c)) {
		return runtime.Options{}, cliutil.Usagef("--engine %q: want one of %s", c.String("engine"), strings.Join(devices, ", "))
	}
	vram, err := vramBudget(c)
	if err != nil {
		return runtime.Options{}, err
	}
	return runtime.Options{Threads: c.Int("threads"), Device: engineDevice(c), Experts: x,
		RopeScaling: c.String("rope-scaling"), MaxContext: c.Int("max-context"), VRAMBudget: vram, KVBits: kvBits(c)}, nil
}

// vramBudget reads --vram-budget: 0 for auto; a size only with --engine gpu.
func vramBudget(c *cli.Context) (int64, error) {
	v := strings.TrimSpace(c.String("vram-budget"))
	if v == "" || strings.EqualFold(v, "auto") {
		return 0, nil
	}
	if engineDevice(c) != nvmodel.GPU {
		return 0, cliutil.Usagef("--vram-budget %s applies to --engine gpu; the %s engine keeps its experts in RAM (--ram-budget)", v, engineDevice(c))
	}
	b, err := expertcache.ParseSize(v)
	if err != nil {
		return 0, cliutil.Usagef("--vram-budget: %v (a size such as 12G, or auto)", err)
	}
	if b == 0 {
		return 0, cliutil.Usagef("--vram-budget 0 holds nothing; give a size such as 12G, or auto")
	}
	return b, nil
}

// checkExpertFlags refuses an expert cache that cannot hold the experts one
// token routes to, and warns about values the cache lowers.
func checkExpertFlags(c *cli.Context, m *packexperts.Manifest, x runtime.ExpertOptions) error {
	e := m.Experts
	minBudget := expertcache.MinBudget(e.Stride, len(e.Layers), e.TopK)
	switch {
	case x.Slots > 0 && x.Slots < e.TopK:
		return cliutil.Usagef("--expert-cache-slots %d cannot hold the %d experts one token routes to; use %d to %d", x.Slots, e.TopK, e.TopK, e.Count)
	case x.Slots > e.Count:
		cliutil.Warnf(c, "--expert-cache-slots %d is more than the %d experts per layer; caching all %d", x.Slots, e.Count, e.Count)
	case x.Budget > 0 && x.Budget < minBudget:
		return cliutil.Usagef("--ram-budget %s is below this model's minimum of %s (%d layers × %d experts × %s)",
			c.String("ram-budget"), cliutil.Bytes(minBudget), len(e.Layers), e.TopK, cliutil.Bytes(e.Stride))
	}
	if x.Prefetch > e.TopK {
		cliutil.Warnf(c, "--prefetch %d is more than the %d experts a token routes to; reading ahead %d", x.Prefetch, e.TopK, e.TopK)
	}
	return nil
}

// prefetchFlag maps --prefetch (0 turns it off) onto ExpertOptions.Prefetch
// (0 is the default there).
func prefetchFlag(c *cli.Context) int {
	if c.IsSet("prefetch") && c.Int("prefetch") <= 0 {
		return -1
	}
	return c.Int("prefetch")
}

// sessionOptions applies --max-context and --kv-initial, lowered with a
// warning to what the model allows.
func sessionOptions(c *cli.Context, e *runtime.Engine) runtime.SessionOptions {
	modelMax := e.Info().MaxContext // with --rope-scaling yarn, the extended context
	maxCtx := c.Int("max-context")
	if modelMax > 0 && maxCtx > modelMax {
		cliutil.Warnf(c, "--max-context %d is more than this model's maximum of %d tokens; using %d", maxCtx, modelMax, modelMax)
		maxCtx = modelMax
	}
	limit := maxCtx
	if limit == 0 {
		limit = modelMax
	}
	kv := c.Int("kv-initial")
	if limit > 0 && kv > limit {
		cliutil.Warnf(c, "--kv-initial %d is more than the context limit of %d tokens; using %d", kv, limit, limit)
		kv = limit
	}
	return runtime.SessionOptions{KVInitial: kv, MaxContext: maxCtx, KVBits: kvBits(c)}
}

// plural spells "1 token", "2 tokens".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
