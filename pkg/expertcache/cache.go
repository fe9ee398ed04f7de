package expertcache

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/hugemem"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// DefaultIOThreads is NVMAI's reader pool size: on its SSD 4 threads reached
// the device ceiling (3.92 GB/s, the same as 8), nvmai-reference §6.4.
const DefaultIOThreads = 4

// MaxIOThreads bounds Options.IOThreads; beyond it more readers only add
// threads blocked in the kernel.
const MaxIOThreads = 64

// Options configures a Cache.
type Options struct {
	// Budget is the memory for expert slots, all layers together, in bytes.
	// Slots per layer = Budget / (stride × layers), rounded down (see
	// SlotsForBudget) and capped at the experts per layer. 0 means
	// DefaultBudget(manifest bits, MemTotal()).
	Budget int64
	// Slots per layer; when positive it wins over Budget.
	Slots int
	// IOThreads is the number of reader goroutines; 0 means DefaultIOThreads.
	IOThreads int
	// IO selects the read path; the zero value is IOBounded.
	IO IOMode
	// Policy picks eviction victims; the zero value is PolicyDefault.
	Policy Policy
	// Prefetch is how many experts per layer the model predicts and the
	// cache reads ahead (see Prefetch): 0 means DefaultPrefetch, a negative
	// value turns prediction off.
	Prefetch int
	// NoWarm turns off warm reads: the next layer's experts read into its
	// empty slots during a long prefill pass's visit (warm.go). For A/B
	// measurements; output is the same either way.
	NoWarm bool
}

// Cache is the bounded expert slot cache of one install. It implements
// model.Experts and model.AcquireLimiter.
type Cache struct {
	dir      string
	stride   int64
	experts  int
	slots    int
	threads  int
	mode     IOMode
	policy   Policy
	layers   []*layerCache
	reqs     chan readReq // demand reads
	spec     chan readReq // speculative reads, served when no demand waits
	done     chan readDone
	readers  sync.WaitGroup
	busy     atomic.Bool
	closed   bool
	seen     []bool // scratch for checkIDs, per expert
	position []int  // scratch for Visit: expert → index in the caller's ids
	// VisitGroups' scratch (one caller at a time): a group's batch
	// positions, indices into ids and mats.
	group     []int
	groupIdx  []int
	groupMats []model.ExpertMats
	loading   []int // scratch: slot → index in the batch being read, or -1

	topK     int
	prefetch int           // experts per layer to read ahead; 0: off
	specMax  int           // speculative reads in flight at most
	warm     bool          // read the next layer ahead in wide visits (warm.go)
	warmMax  int           // warm reads in flight at most, beyond specMax
	specOut  int           // speculative reads in flight (owner goroutine only)
	visits   atomic.Uint64 // visits begun; a speculative read names the one it is for

	mu    sync.Mutex // residency and stats: release may run on any goroutine
	stats Stats
}

type layerCache struct {
	index  int
	path   string
	fd     int
	slab   []byte // slots × stride bytes of region
	region *hugemem.Region
	views  []model.ExpertMats
	res    residency
	// Per slot: a speculative read is writing into it; it was filled by a
	// speculative read (Prefetch; a warm read) and not asked for since.
	spec, prefetched, warmed []bool
	// hits and misses are this layer's share of Stats' (under Cache.mu).
	hits, misses int64
}

var (
	_ model.Experts            = (*Cache)(nil)
	_ model.AcquireLimiter     = (*Cache)(nil)
	_ model.ExpertVisitor      = (*Cache)(nil)
	_ model.ExpertGroupVisitor = (*Cache)(nil)
	_ model.ExpertPrefetcher   = (*Cache)(nil)
	_ model.PassWarmer         = (*Cache)(nil)
)

// New opens the expert files of the install in dir described by m (already
// validated, e.g. by packexperts.ReadManifest), allocates the slots and
// starts the readers.
func New(dir string, m *packexperts.Manifest, opt Options) (*Cache, error) {
	x := m.Experts
	if x == nil || len(x.Layers) == 0 {
		return nil, fmt.Errorf("%s: the install has no routed experts; a dense model needs no expert cache", dir)
	}
	if x.Stride <= 0 || x.Stride%limits.DirectIOAlign != 0 || x.Count <= 0 || x.TopK <= 0 || x.TopK > x.Count {
		return nil, fmt.Errorf("%s: experts stride %d, count %d, top_k %d are not a valid layout; run nvmai-verify --verify-install %s", dir, x.Stride, x.Count, x.TopK, dir)
	}
	slots, err := slotsPerLayer(opt, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	threads := opt.IOThreads
	if threads == 0 {
		threads = DefaultIOThreads
	}
	if threads < 1 || threads > MaxIOThreads {
		return nil, fmt.Errorf("expert cache: %d I/O threads; use 1 to %d", threads, MaxIOThreads)
	}
	policy, err := opt.Policy.resolve()
	if err != nil {
		return nil, err
	}
	if int64(slots) > math.MaxInt/x.Stride {
		return nil, fmt.Errorf("%s: %d slots of %d bytes cannot be addressed", dir, slots, x.Stride)
	}
	c := &Cache{dir: dir, stride: x.Stride, experts: x.Count, slots: slots, threads: threads, policy: policy,
		seen: make([]bool, x.Count), position: make([]int, x.Count), loading: make([]int, slots), topK: x.TopK}
	c.prefetch, c.specMax = prefetchWidth(opt.Prefetch, slots, x.Count, x.TopK)
	if c.warm = !opt.NoWarm; c.warm {
		// A visit queues the next layer's guesses while its own may still
		// be landing: two layers' worth.
		c.warmMax = 2 * slots
	}
	if err := c.open(x, opt.IO); err != nil {
		c.Close()
		return nil, err
	}
	c.stats = Stats{Mode: c.mode.String(), Policy: policy.String(), SlotsPerLayer: slots, IOThreads: threads, PrefetchWidth: c.prefetch,
		Warm: c.warm, BudgetBytes: int64(slots) * x.Stride * int64(len(x.Layers))}
	c.reqs = make(chan readReq, slots)
	c.spec = make(chan readReq, max(c.specMax+c.warmMax, 1))
	// Room for every read that can be in flight, so a reader never blocks.
	c.done = make(chan readDone, slots+c.specMax+c.warmMax)
	c.readers.Add(threads)
	for range threads {
		go func() { defer c.readers.Done(); reader(c.reqs, c.spec, &c.visits) }()
	}
	return c, nil
}

// slotsPerLayer applies Options.Slots or the budget, and refuses a cache
// that cannot hold the top_k experts one token routes to in a layer.
func slotsPerLayer(opt Options, m *packexperts.Manifest) (int, error) {
	x := m.Experts
	layers := len(x.Layers)
	minBudget := MinBudget(x.Stride, layers, x.TopK)
	slots := opt.Slots
	switch {
	case slots < 0:
		return 0, fmt.Errorf("expert cache: %d slots per layer; the count must be positive", slots)
	case slots > 0 && slots < x.TopK:
		return 0, fmt.Errorf("expert cache: %d slots per layer cannot hold the %d experts one token routes to; use at least %d slots (a budget of %s)", slots, x.TopK, x.TopK, sizeFlagCeil(minBudget))
	case slots == 0:
		budget := opt.Budget
		if budget == 0 {
			total, _ := MemTotal() // unknown RAM leaves the 8 GiB default
			budget = DefaultBudget(m.Bits, total)
		}
		if budget < 0 {
			return 0, fmt.Errorf("expert cache: budget %d bytes is negative", budget)
		}
		slots = SlotsForBudget(budget, x.Stride, layers)
		if slots < x.TopK {
			return 0, fmt.Errorf("expert cache budget %s buys %d slots per layer (%d layers × %s per expert), fewer than the %d experts one token routes to; the minimum budget is %s (%d bytes)",
				FormatSize(budget), slots, layers, FormatSize(x.Stride), x.TopK, sizeFlagCeil(minBudget), minBudget)
		}
	}
	return min(slots, x.Count), nil
}

// open maps the slots, builds their views, picks the read mode and opens
// every layer file.
func (c *Cache) open(x *packexperts.Experts, want IOMode) error {
	for i, l := range x.Layers {
		if err := packexperts.ValidRelPath(l.File); err != nil {
			return fmt.Errorf("%s: expert layer %d: %w", c.dir, i, err)
		}
		lc := &layerCache{index: i, path: filepath.Join(c.dir, filepath.FromSlash(l.File)), fd: -1,
			res: newResidency(c.slots, c.experts, c.policy)}
		c.layers = append(c.layers, lc)
		if err := c.checkFile(lc.path); err != nil {
			return err
		}
		if err := lc.allocate(c.slots, c.stride, x.Parts); err != nil {
			return fmt.Errorf("%s: %w", lc.path, err)
		}
	}
	mode, err := chooseMode(c.layers[0].path, want, c.layers[0].slab)
	if err != nil {
		return err
	}
	c.mode = mode
	for _, lc := range c.layers {
		if lc.fd, err = openLayer(lc.path, mode); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cache) checkFile(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%s: %w; the install is incomplete: run nvmai-verify --verify-install %s", path, err, c.dir)
	}
	if want := int64(c.experts) * c.stride; st.Size != want {
		return fmt.Errorf("%s is %d bytes, the manifest says %d experts × %d = %d; run nvmai-verify --verify-install %s", path, st.Size, c.experts, c.stride, want, c.dir)
	}
	return nil
}

func (lc *layerCache) allocate(slots int, stride int64, parts []packexperts.Tensor) error {
	region, err := hugemem.Alloc(slots * int(stride))
	if err != nil {
		return fmt.Errorf("allocating %d expert slots of %s: %w", slots, FormatSize(stride), err)
	}
	lc.region, lc.slab = region, region.Bytes
	lc.views = make([]model.ExpertMats, slots)
	lc.spec, lc.prefetched, lc.warmed = make([]bool, slots), make([]bool, slots), make([]bool, slots)
	for s := range slots {
		if lc.views[s], err = slotMats(lc.slot(s, stride), parts); err != nil {
			return err
		}
	}
	return nil
}

func (lc *layerCache) slot(s int, stride int64) []byte {
	return lc.slab[int64(s)*stride : int64(s+1)*stride : int64(s+1)*stride]
}

// FilledSlots returns, per layer, the memory of every slot that holds an
// expert now. It is for measurements that read the very memory decode
// reads (nvmai-run bench's plain read); the slices must only be read, and
// only while no Acquire or Visit runs.
func (c *Cache) FilledSlots() [][][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][][]byte, len(c.layers))
	for l, lc := range c.layers {
		for s, st := range lc.res.slots {
			if st.expert >= 0 && !lc.spec[s] {
				out[l] = append(out[l], lc.slot(s, c.stride))
			}
		}
	}
	return out
}

// MaxAcquire is the number of slots per layer: the most experts one Acquire
// can hold (model.AcquireLimiter).
func (c *Cache) MaxAcquire() int { return c.slots }

// enter claims the cache for one Acquire or Visit and counts it.
func (c *Cache) enter(layer int, ids []int) (*layerCache, error) {
	if !c.busy.CompareAndSwap(false, true) {
		return nil, errors.New("expert cache: Acquire or Visit called while another is running; one cache serves one caller at a time")
	}
	if c.closed {
		c.busy.Store(false)
		return nil, errors.New("expert cache: used after Close")
	}
	if layer < 0 || layer >= len(c.layers) {
		c.busy.Store(false)
		return nil, fmt.Errorf("expert cache: layer %d has no expert file (the install has %d)", layer, len(c.layers))
	}
	if err := checkIDs(layer, ids, c.experts, c.seen); err != nil {
		c.busy.Store(false)
		return nil, err
	}
	c.visits.Add(1) // speculative reads for earlier visits are now stale
	return c.layers[layer], nil
}

func (c *Cache) leave() { c.busy.Store(false) }

// Acquire returns the experts ids of layer, in the order of ids, once every
// one is resident; their slots stay pinned (never evicted) until release.
// More ids than MaxAcquire, or more misses than unpinned slots while other
// acquisitions are held, is an error: the model batches by MaxAcquire.
func (c *Cache) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	lc, slotOf, release, err := c.acquire(layer, ids)
	if err != nil {
		return nil, nil, err
	}
	mats := make([]model.ExpertMats, len(ids))
	for i, s := range slotOf {
		mats[i] = lc.views[s]
	}
	return mats, release, nil
}

// AcquireRecords is Acquire handing over each expert's whole record (stride
// bytes, the layout of its layer file) instead of views: an engine that
// copies records elsewhere (the GPU's VRAM slots) reads them from the slot
// memory itself. The records stay valid, unchanged, until release.
func (c *Cache) AcquireRecords(layer int, ids []int) ([][]byte, func(), error) {
	lc, slotOf, release, err := c.acquire(layer, ids)
	if err != nil {
		return nil, nil, err
	}
	recs := make([][]byte, len(ids))
	for i, s := range slotOf {
		recs[i] = lc.slot(s, c.stride)
	}
	return recs, release, nil
}

// Slabs is every layer's slot memory (slots × stride bytes each, in the
// install's expert-layer order), for an engine that registers it with a
// device (page-locking it) once after New and unregisters it before Close.
// Nothing may be written through it.
func (c *Cache) Slabs() [][]byte {
	out := make([][]byte, len(c.layers))
	for i, lc := range c.layers {
		out[i] = lc.slab
	}
	return out
}

// Stride is the bytes of one expert record.
func (c *Cache) Stride() int64 { return c.stride }

// acquire is Acquire's work: it pins and fills a slot for each of ids and
// returns the slots and their release.
func (c *Cache) acquire(layer int, ids []int) (*layerCache, []int, func(), error) {
	lc, err := c.enter(layer, ids)
	if err != nil {
		return nil, nil, nil, err
	}
	defer c.leave()
	c.drainSpec()
	if len(ids) > c.slots {
		return nil, nil, nil, fmt.Errorf("expert cache: layer %d: %d experts asked for at once, but the cache holds %d per layer (MaxAcquire); acquire in batches", layer, len(ids), c.slots)
	}
	slotOf := make([]int, len(ids))
	load, err := c.place(lc, ids, slotOf)
	if err != nil {
		return nil, nil, nil, err
	}
	start := c.submit(lc, ids, slotOf, load)
	var firstErr error
	var lastEnd time.Time
	for range load {
		d := c.await()
		lastEnd = later(lastEnd, d.end)
		if err := c.landed(lc, d, ids); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	c.addReadTime(start, lastEnd, len(load))
	if firstErr != nil {
		c.unpinAll(lc, slotOf)
		return nil, nil, nil, firstErr
	}
	var once sync.Once
	release := func() { once.Do(func() { c.unpinAll(lc, slotOf) }) }
	return lc, slotOf, release, nil
}

// Visit calls fn(i, mats of ids[i]) once for every i, on the caller's
// goroutine: first for the experts already resident, then for each missing
// one as soon as its read lands, so computing with one expert overlaps
// reading the next. A slot is pinned from the moment it is chosen until fn
// returns for it; the mats must not be used after that. Requests larger
// than the unpinned slots are served rolling (resident experts first, each
// freed slot at once reading the next missing expert; rolling.go).
// The first error from fn stops further calls and is returned after the
// reads in flight finish.
func (c *Cache) Visit(layer int, ids []int, fn func(i int, m model.ExpertMats) error) error {
	return c.VisitGroups(layer, ids, func(idx []int, mats []model.ExpertMats) error {
		for j, i := range idx {
			if err := fn(i, mats[j]); err != nil {
				return err
			}
		}
		return nil
	})
}

// VisitGroups is Visit handing over, in one call, every expert that is
// ready at the same time: all the resident ones of a batch together, then
// each missing one as its read lands. fn gets the indices into ids and
// their mats (both valid only until it returns), so a caller can compute a
// group's products as one parallel job.
func (c *Cache) VisitGroups(layer int, ids []int, fn func(idx []int, mats []model.ExpertMats) error) error {
	lc, err := c.enter(layer, ids)
	if err != nil {
		return err
	}
	defer c.leave()
	c.reapSpec()
	if len(ids) == 0 {
		return nil
	}
	for i, e := range ids {
		c.position[e] = i
	}
	c.mu.Lock()
	lc.res.tick()
	free := lc.res.free()
	batches := lc.res.visitOrder(ids, free)
	c.mu.Unlock()
	if free == 0 {
		return fmt.Errorf("expert cache: layer %d: all %d slots are pinned by unreleased acquisitions; release them before Visit", layer, c.slots)
	}
	if len(batches) > 1 {
		return c.visitRolling(lc, ids, fn)
	}
	for _, batch := range batches {
		if err := c.visitBatch(lc, batch, fn); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cache) visitBatch(lc *layerCache, batch []int, fn func([]int, []model.ExpertMats) error) error {
	slotOf := make([]int, len(batch))
	load, err := c.placeBatch(lc, batch, slotOf)
	if err != nil {
		return err
	}
	unpin := func(i int) {
		c.mu.Lock()
		lc.res.unpin(slotOf[i])
		c.mu.Unlock()
		slotOf[i] = -1
	}
	start := c.submit(lc, batch, slotOf, load)
	c.warmAfter(lc, len(batch)) // the only batch: every read of lc is queued
	outstanding := len(load) + c.awaitSpec(lc, slotOf)
	var firstErr error
	defer func() {
		// Also runs when fn panics: reads still write into the slots, so
		// wait for them before any slot can be reused.
		for ; outstanding > 0; outstanding-- {
			c.awaitBatch(lc, batch)
		}
		for i := range slotOf {
			if slotOf[i] >= 0 {
				unpin(i)
			}
		}
	}()
	call := func(group []int) {
		if firstErr == nil && len(group) > 0 {
			c.groupIdx, c.groupMats = c.groupIdx[:0], c.groupMats[:0]
			for _, i := range group {
				c.groupIdx = append(c.groupIdx, c.position[batch[i]])
				c.groupMats = append(c.groupMats, lc.views[slotOf[i]])
			}
			firstErr = fn(c.groupIdx, c.groupMats)
		}
		for _, i := range group {
			unpin(i)
		}
	}
	c.group = c.group[:0]
	for i, s := range slotOf {
		if c.loading[s] < 0 {
			c.group = append(c.group, i)
		}
	}
	call(c.group)
	var lastEnd time.Time
	for ; outstanding > 0; outstanding-- {
		d, err := c.awaitBatch(lc, batch)
		if !d.spec {
			lastEnd = later(lastEnd, d.end)
		}
		i := c.loading[d.slot]
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			unpin(i)
			continue
		}
		c.group = append(c.group[:0], i)
		call(c.group)
	}
	c.addReadTime(start, lastEnd, len(load))
	return firstErr
}

// place pins slots for ids and counts hits and misses.
func (c *Cache) place(lc *layerCache, ids []int, slotOf []int) ([]int, error) {
	c.mu.Lock()
	lc.res.tick()
	c.mu.Unlock()
	return c.placeBatch(lc, ids, slotOf)
}

func (c *Cache) placeBatch(lc *layerCache, ids []int, slotOf []int) ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	load, err := lc.res.place(ids, slotOf, nil)
	if err != nil {
		return nil, fmt.Errorf("expert cache: layer %d: %w; release earlier acquisitions first", lc.index, err)
	}
	for _, s := range load {
		lc.prefetched[s], lc.warmed[s] = false, false // a guess evicted unused
	}
	for _, s := range slotOf {
		if lc.prefetched[s] {
			lc.prefetched[s] = false
			c.stats.PrefetchHits++
		}
		if lc.warmed[s] {
			lc.warmed[s] = false
			c.stats.WarmHits++
		}
	}
	c.stats.Misses += int64(len(load))
	c.stats.Hits += int64(len(ids) - len(load))
	lc.misses += int64(len(load))
	lc.hits += int64(len(ids) - len(load))
	return load, nil
}

// submit queues a read for every slot in load and marks, in c.loading,
// which index of ids each slot is being filled for.
func (c *Cache) submit(lc *layerCache, ids []int, slotOf []int, load []int) time.Time {
	const toRead = -2
	for s := range c.loading {
		c.loading[s] = -1
	}
	for _, s := range load {
		c.loading[s] = toRead
	}
	for i, s := range slotOf {
		if c.loading[s] == toRead {
			c.loading[s] = i
		}
	}
	start := time.Now()
	for _, s := range load {
		c.reqs <- c.readOf(lc, s, ids[c.loading[s]])
	}
	return start
}

// readOf is the demand read filling slot s of lc with expert e.
func (c *Cache) readOf(lc *layerCache, s, e int) readReq {
	return readReq{fd: lc.fd, mode: c.mode, buf: lc.slot(s, c.stride), off: int64(e) * c.stride, layer: lc.index, slot: s, done: c.done}
}

// await waits for one read, counting the time the caller was blocked.
func (c *Cache) await() readDone {
	t := time.Now()
	d := <-c.done
	wait := time.Since(t).Seconds()
	c.mu.Lock()
	c.stats.WaitSeconds += wait
	c.mu.Unlock()
	return d
}

// landed accounts for one finished read; a failed slot is emptied so its
// partial bytes are never served.
func (c *Cache) landed(lc *layerCache, d readDone, ids []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.err == nil {
		c.stats.BytesRead += c.stride
		return nil
	}
	lc.res.forget(d.slot)
	e := ids[c.loading[d.slot]]
	return fmt.Errorf("expert cache: layer %d expert %d: reading %s at offset %d (%v): %w; if the file is damaged run nvmai-verify --verify-install %s",
		lc.index, e, lc.path, int64(e)*c.stride, c.mode, d.err, c.dir)
}

func (c *Cache) addReadTime(start, end time.Time, reads int) {
	if reads == 0 {
		return
	}
	c.mu.Lock()
	c.stats.ReadSeconds += end.Sub(start).Seconds()
	c.mu.Unlock()
}

func (c *Cache) unpinAll(lc *layerCache, slotOf []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range slotOf {
		lc.res.unpin(s)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Close stops the readers, unmaps every slot and closes the files. Experts
// handed out become invalid.
func (c *Cache) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	if c.reqs != nil {
		close(c.reqs)
		close(c.spec)
		c.readers.Wait()
	}
	var first error
	for _, lc := range c.layers {
		if lc.fd >= 0 {
			if err := unix.Close(lc.fd); err != nil && first == nil {
				first = fmt.Errorf("closing %s: %w", lc.path, err)
			}
			lc.fd = -1
		}
		if lc.slab != nil {
			if err := lc.region.Free(); err != nil && first == nil {
				first = fmt.Errorf("unmapping the slots of %s: %w", lc.path, err)
			}
			lc.slab, lc.views = nil, nil
		}
	}
	return first
}
