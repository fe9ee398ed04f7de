package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

// Device is one GPU with its primary context, one stream, and the device
// goroutine that makes every driver call.
type Device struct {
	Name     string
	Arch     int // compute capability as major·10 + minor (90 for Hopper)
	SMs      int
	TotalMem uint64
	Driver   int // cuDriverGetVersion
	Libs     Libraries
	NVRTCVer [2]int
	// PDL launches every kernel with programmatic dependent launch (sm_90
	// and newer, a driver with cuLaunchKernelEx): a kernel's blocks start
	// while the previous kernel drains and wait in griddepcontrol.wait, which
	// hides most of the gap between dependent kernels. On by default where
	// supported; NVMAI_GPU_PDL=0 turns it off. Change it only between Do calls.
	PDL bool

	d      *driver
	rt     *nvrtc
	ord    int32
	ctx    handle
	stream handle
	// side is the second stream (SideStream creates it): work forked off
	// stream with an event and joined back with another (Fork, Join), so
	// it runs beside the stream's kernels, inside a graph capture too.
	side           handle
	forked, joined handle // the events Fork and Join record
	plainNext      bool   // Join ran: the next launch on stream takes no PDL
	work           chan func()
	done           chan struct{}
	once           sync.Once

	marks []handle // MarkSide's events (marks.go)
}

// Ctx is the driver as seen from the device goroutine: its methods are only
// valid inside Device.Do. Its launches go on the device's stream, or on the
// side stream for a Ctx from Side.
type Ctx struct {
	dev  *Device
	side bool
}

var errClosed = errors.New("cuda: device is closed")

// Open finds the libraries, initialises the driver and takes GPU ordinal's
// primary context. The error names what is missing when there is no usable
// driver, NVRTC or GPU.
func Open(ordinal int) (*Device, error) {
	libs, err := FindLibraries()
	if err != nil {
		// Name the driver first when it is missing too: it is the larger gap.
		if _, derr := loadDriver(libs.Driver); derr != nil {
			return nil, fmt.Errorf("%v; and %v", derr, err)
		}
		return nil, err
	}
	return OpenWith(libs, ordinal)
}

// OpenWith is Open with the libraries already chosen.
func OpenWith(libs Libraries, ordinal int) (*Device, error) {
	dev := &Device{Libs: libs, ord: int32(ordinal), work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error)
	go dev.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return dev, nil
}

// loop is the device goroutine: it owns the OS thread the context is
// current on and runs every closure sent to it.
func (dev *Device) loop(ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := dev.init(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	dev.serve()
}

// serve runs the closures sent to the device until Close, then releases
// it. A closure that ends its goroutine (runtime.Goexit: a test's
// t.Fatal inside Do) would leave every later Do waiting for a device
// goroutine that is gone, so the test binary hangs until its timeout (on
// a GPU machine, minutes of device time); serve hands the device to a new
// goroutine, on a thread of its own with the context current, instead.
func (dev *Device) serve() {
	closed := false
	defer func() {
		if !closed {
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				dev.d.cuCtxSetCurrent(dev.ctx)
				dev.serve()
			}()
		}
	}()
	for fn := range dev.work {
		fn()
	}
	closed = true
	dev.d.cuCtxSynchronize()
	if dev.side != 0 {
		dev.d.cuEventDestroy(dev.forked)
		dev.d.cuEventDestroy(dev.joined)
		dev.d.cuStreamDestroy(dev.side)
	}
	for _, e := range dev.marks {
		dev.d.cuEventDestroy(e)
	}
	dev.d.cuStreamDestroy(dev.stream)
	dev.d.cuDevicePrimaryCtxRelease(dev.ord)
	close(dev.done)
}

func (dev *Device) init() error {
	d, err := loadDriver(dev.Libs.Driver)
	if err != nil {
		return err
	}
	dev.d = d
	if r := d.cuInit(0); r != 0 {
		return fmt.Errorf("the NVIDIA driver (%s) is present but found no usable GPU: %w; check nvidia-smi, or use --engine cpu", dev.Libs.Driver, d.check("cuInit", r))
	}
	var v, n int32
	d.cuDriverGetVersion(&v)
	dev.Driver = int(v)
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return err
	}
	if dev.ord < 0 || dev.ord >= n {
		return fmt.Errorf("cuda: GPU %d asked for, the driver sees %d", dev.ord, n)
	}
	var cu int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&cu, dev.ord)); err != nil {
		return err
	}
	var name [256]byte
	d.cuDeviceGetName(&name[0], int32(len(name)), cu)
	dev.Name = goString(&name[0])
	var major, minor, sms int32
	d.cuDeviceGetAttribute(&major, 75, cu)
	d.cuDeviceGetAttribute(&minor, 76, cu)
	d.cuDeviceGetAttribute(&sms, 16, cu)
	dev.Arch, dev.SMs = int(major*10+minor), int(sms)
	d.cuDeviceTotalMem(&dev.TotalMem, cu)
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dev.ctx, cu)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(dev.ctx)); err != nil {
		return err
	}
	const nonBlocking = 1 // capturable: the legacy stream cannot be captured
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&dev.stream, nonBlocking)); err != nil {
		return err
	}
	rt, err := loadNVRTC(dev.Libs)
	if err != nil {
		return err
	}
	dev.rt = rt
	ma, mi := rt.version()
	dev.NVRTCVer = [2]int{ma, mi}
	dev.PDL = dev.PDLSupported() && os.Getenv("NVMAI_GPU_PDL") != "0"
	return nil
}

// Do runs fn on the device goroutine and waits for it.
func (dev *Device) Do(fn func(c *Ctx) error) (err error) {
	ch := make(chan struct{})
	defer func() {
		if recover() != nil { // send on a closed channel
			err = errClosed
		}
	}()
	dev.work <- func() {
		defer close(ch)
		err = fn(&Ctx{dev: dev})
	}
	<-ch
	return err
}

// Close waits for the device's work, releases the context and ends the
// device goroutine. Memory not freed is released with the context.
func (dev *Device) Close() {
	dev.once.Do(func() {
		close(dev.work)
		<-dev.done
	})
}

// Alloc returns n bytes of device memory (plain cuMemAlloc, never managed).
func (c *Ctx) Alloc(n uint64) (DevicePtr, error) {
	var p DevicePtr
	if n == 0 {
		n = 1
	}
	return p, c.dev.d.check(fmt.Sprintf("cuMemAlloc(%d bytes)", n), c.dev.d.cuMemAlloc(&p, n))
}

// Free releases memory from Alloc.
func (c *Ctx) Free(p DevicePtr) error { return c.dev.d.check("cuMemFree", c.dev.d.cuMemFree(p)) }

// Flags of cuMemHostAlloc (cuda.h).
const (
	memHostAllocPortable  = 0x01 // pinned for every context, not only this one
	memHostAllocDeviceMap = 0x02 // mapped into the device's address space
)

// HostAlloc returns n bytes of page-locked host memory, mapped into the
// device's address space: host is the memory as Go sees it (the driver's,
// not Go's heap: free it with HostFree), dev the address kernels read it
// at, over the bus. A copy from it runs at the link's full rate.
func (c *Ctx) HostAlloc(n uint64) (host []byte, dev DevicePtr, err error) {
	if n == 0 {
		n = 1
	}
	var p unsafe.Pointer
	if err := c.dev.d.check(fmt.Sprintf("cuMemHostAlloc(%d bytes)", n), c.dev.d.cuMemHostAlloc(&p, n, memHostAllocPortable|memHostAllocDeviceMap)); err != nil {
		return nil, 0, err
	}
	if err := c.dev.d.check("cuMemHostGetDevicePointer", c.dev.d.cuMemHostGetDevicePointer(&dev, p, 0)); err != nil {
		c.dev.d.cuMemFreeHost(p)
		return nil, 0, err
	}
	return unsafe.Slice((*byte)(p), n), dev, nil
}

// HostFree releases memory from HostAlloc.
func (c *Ctx) HostFree(host []byte) error {
	if len(host) == 0 {
		return nil
	}
	return c.dev.d.check("cuMemFreeHost", c.dev.d.cuMemFreeHost(unsafe.Pointer(&host[0])))
}

// HostRegister page-locks host memory the caller allocated (page-aligned,
// e.g. an mmap'd region) for every context (CU_MEMHOSTREGISTER_PORTABLE),
// so copies from it run at the link's full rate and truly asynchronously:
// it must stay unchanged until the stream has passed them. Undo it with
// HostUnregister before the memory is freed.
func (c *Ctx) HostRegister(host []byte) error {
	if len(host) == 0 {
		return nil
	}
	return c.dev.d.check(fmt.Sprintf("cuMemHostRegister(%d bytes)", len(host)), c.dev.d.cuMemHostRegister(unsafe.Pointer(&host[0]), uint64(len(host)), memHostAllocPortable))
}

// HostUnregister undoes HostRegister.
func (c *Ctx) HostUnregister(host []byte) error {
	if len(host) == 0 {
		return nil
	}
	return c.dev.d.check("cuMemHostUnregister", c.dev.d.cuMemHostUnregister(unsafe.Pointer(&host[0])))
}

// MemInfo returns free and total device memory.
func (c *Ctx) MemInfo() (free, total uint64, err error) {
	err = c.dev.d.check("cuMemGetInfo", c.dev.d.cuMemGetInfo(&free, &total))
	return
}

// HtoD copies src to dst on the stream and waits for it, so src may be
// reused on return and later work on the stream sees dst. (cuMemcpyHtoD
// would copy on the legacy default stream, which the engine's non-blocking
// stream does not wait for: from pageable memory it returns once src is
// staged, and a kernel launched next could read dst before the copy lands.)
func (c *Ctx) HtoD(dst DevicePtr, src []byte) error {
	if err := c.HtoDAsync(dst, src); err != nil {
		return err
	}
	err := c.Sync()
	runtime.KeepAlive(src)
	return err
}

// HtoDAsync enqueues a copy on the stream; src must stay unchanged until
// the stream has passed it (it is staged by the driver when pageable).
func (c *Ctx) HtoDAsync(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	err := c.dev.d.check("cuMemcpyHtoDAsync", c.dev.d.cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uint64(len(src)), c.dev.stream))
	runtime.KeepAlive(src)
	return err
}

// DtoH waits for the stream, then copies src into dst.
func (c *Ctx) DtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := c.Sync(); err != nil {
		return err
	}
	err := c.dev.d.check("cuMemcpyDtoH", c.dev.d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), src, uint64(len(dst))))
	runtime.KeepAlive(dst)
	return err
}

// DtoD enqueues a device-to-device copy.
func (c *Ctx) DtoD(dst, src DevicePtr, n uint64) error {
	return c.dev.d.check("cuMemcpyDtoDAsync", c.dev.d.cuMemcpyDtoDAsync(dst, src, n, c.dev.stream))
}

// Memset32 enqueues filling n 32-bit words at p with v.
func (c *Ctx) Memset32(p DevicePtr, v uint32, n uint64) error {
	return c.dev.d.check("cuMemsetD32Async", c.dev.d.cuMemsetD32Async(p, v, n, c.dev.stream))
}

// Sync waits for the stream; a kernel fault surfaces here.
func (c *Ctx) Sync() error {
	return c.dev.d.check("cuStreamSynchronize", c.dev.d.cuStreamSynchronize(c.dev.stream))
}

// Module is a loaded cubin.
type Module struct {
	h     handle
	funcs map[string]*Function
}

// Function is a kernel of a module.
type Function struct {
	h    handle
	Name string
}

// LoadSource compiles src (cached under CacheDir by source, options, target
// and NVRTC version) and loads it.
func (c *Ctx) LoadSource(src, name string, extraOpts ...string) (*Module, error) {
	dev := c.dev
	opts := append(append([]string{}, CompileOptions...), extraOpts...)
	key := CacheKey(src, opts, dev.Arch, dev.NVRTCVer[0], dev.NVRTCVer[1])
	dir := CacheDir()
	cubin := readCache(dir, key)
	if cubin == nil {
		var err error
		if cubin, err = dev.rt.compile(src, name, dev.Arch, extraOpts); err != nil {
			return nil, err
		}
		writeCache(dir, key, cubin)
	}
	return c.LoadCubin(cubin)
}

// LoadCubin loads a compiled module.
func (c *Ctx) LoadCubin(cubin []byte) (*Module, error) {
	m := &Module{funcs: map[string]*Function{}}
	err := c.dev.d.check("cuModuleLoadData", c.dev.d.cuModuleLoadData(&m.h, unsafe.Pointer(&cubin[0])))
	runtime.KeepAlive(cubin)
	return m, err
}

// Func looks up an extern "C" kernel.
func (c *Ctx) Func(m *Module, name string) (*Function, error) {
	if f, ok := m.funcs[name]; ok {
		return f, nil
	}
	f := &Function{Name: name}
	if err := c.dev.d.check("cuModuleGetFunction("+name+")", c.dev.d.cuModuleGetFunction(&f.h, m.h, name)); err != nil {
		return nil, err
	}
	m.funcs[name] = f
	return f, nil
}

// SMs is the GPU's multiprocessor count (grids sized to one wave).
func (c *Ctx) SMs() int { return c.dev.SMs }

// SetMaxDynamicShared lets f take more than 48 KiB of dynamic shared memory.
func (c *Ctx) SetMaxDynamicShared(f *Function, bytes int) error {
	return c.dev.d.check("cuFuncSetAttribute", c.dev.d.cuFuncSetAttribute(f.h, 8, int32(bytes)))
}

// SetCarveout sets f's preferred shared-memory carve-out, in percent of
// the L1/shared array (−1: no preference).
func (c *Ctx) SetCarveout(f *Function, percent int) error {
	return c.dev.d.check("cuFuncSetAttribute(carveout)", c.dev.d.cuFuncSetAttribute(f.h, 9, int32(percent)))
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// D1 is a one-dimensional shape.
func D1(x int) Dim3 { return Dim3{uint32(x), 1, 1} }

// D2 is a two-dimensional shape.
func D2(x, y int) Dim3 { return Dim3{uint32(x), uint32(y), 1} }

// PDLSupported reports whether the device and driver can launch with
// programmatic dependent launch.
func (dev *Device) PDLSupported() bool {
	return dev.Arch >= 90 && dev.d != nil && dev.d.cuLaunchKernelEx != nil
}

// launchConfig is CUlaunchConfig (cuda.h) with room for one attribute:
// 7 uint32 (grid, block, shared bytes), the stream at 32, attrs at 40,
// numAttrs at 48; each CUlaunchAttribute is an id, 4 bytes of padding and a
// 64-byte value union.
type launchConfig struct {
	grid     [3]uint32
	block    [3]uint32
	smem     uint32
	stream   uintptr
	attrs    unsafe.Pointer
	numAttrs uint32
	_        uint32
}

type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

const attrProgrammaticStreamSerialization = 6 // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

// Launch enqueues f on the stream. Arguments are DevicePtr, int (passed as
// a 32-bit int), int32, uint32, uint64, float32 or []byte (a struct passed
// by value, laid out by the caller), in the kernel's order.
func (c *Ctx) Launch(f *Function, grid, block Dim3, smem int, args ...any) error {
	vals := make([]uint64, len(args)+1)
	ptrs := make([]unsafe.Pointer, len(args)+1)
	for i, a := range args {
		if b, ok := a.([]byte); ok {
			if len(b) == 0 {
				return fmt.Errorf("cuda: launch %s: argument %d is an empty struct", f.Name, i)
			}
			ptrs[i] = unsafe.Pointer(&b[0])
			continue
		}
		switch v := a.(type) {
		case DevicePtr:
			vals[i] = uint64(v)
		case uint64:
			vals[i] = v
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("cuda: launch %s: argument %d (%d) does not fit a 32-bit int", f.Name, i, v)
			}
			vals[i] = uint64(uint32(int32(v)))
		case int32:
			vals[i] = uint64(uint32(v))
		case uint32:
			vals[i] = uint64(v)
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		case float64:
			vals[i] = math.Float64bits(v)
		default:
			return fmt.Errorf("cuda: launch %s: argument %d has unsupported type %T", f.Name, i, a)
		}
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 {
		return nil // nothing to do
	}
	stream := c.dev.stream
	// A kernel on the side stream, and the first one on the stream after
	// a Join, launch without PDL: their dependencies cross streams, and a
	// plain launch waits for all of them to finish (under PDL only every
	// kernel's griddepcontrol.wait would).
	pdl := c.dev.PDL && !c.side && !c.dev.plainNext
	if c.side {
		stream = c.dev.side
	} else {
		c.dev.plainNext = false
	}
	if pdl {
		attr := &launchAttr{id: attrProgrammaticStreamSerialization}
		attr.value[0] = 1 // programmaticStreamSerializationAllowed
		cfg := &launchConfig{grid: [3]uint32{grid.X, grid.Y, grid.Z}, block: [3]uint32{block.X, block.Y, block.Z},
			smem: uint32(smem), stream: stream, attrs: unsafe.Pointer(attr), numAttrs: 1}
		r := c.dev.d.cuLaunchKernelEx(unsafe.Pointer(cfg), f.h, unsafe.Pointer(&ptrs[0]), nil)
		runtime.KeepAlive(cfg)
		runtime.KeepAlive(attr)
		runtime.KeepAlive(args)
		runtime.KeepAlive(vals)
		runtime.KeepAlive(ptrs)
		return c.dev.d.check("cuLaunchKernelEx("+f.Name+")", r)
	}
	r := c.dev.d.cuLaunchKernel(f.h, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, uint32(smem), stream, unsafe.Pointer(&ptrs[0]), nil)
	runtime.KeepAlive(args)
	runtime.KeepAlive(vals)
	runtime.KeepAlive(ptrs)
	return c.dev.d.check("cuLaunchKernel("+f.Name+")", r)
}

// Graph is an instantiated CUDA graph.
type Graph struct {
	exec  handle
	graph handle
	Nodes int
}

// BeginCapture starts recording the stream's work into a graph.
func (c *Ctx) BeginCapture() error {
	const threadLocal = 1
	return c.dev.d.check("cuStreamBeginCapture", c.dev.d.cuStreamBeginCapture(c.dev.stream, threadLocal))
}

// EndCapture ends the recording and instantiates it.
func (c *Ctx) EndCapture() (*Graph, error) {
	g := &Graph{}
	if err := c.dev.d.check("cuStreamEndCapture", c.dev.d.cuStreamEndCapture(c.dev.stream, &g.graph)); err != nil {
		return nil, err
	}
	var n uint64
	c.dev.d.cuGraphGetNodes(g.graph, nil, &n)
	g.Nodes = int(n)
	if err := c.dev.d.check("cuGraphInstantiate", c.dev.d.cuGraphInstantiateWithFlags(&g.exec, g.graph, 0)); err != nil {
		c.dev.d.cuGraphDestroy(g.graph)
		return nil, err
	}
	return g, nil
}

// LaunchGraph enqueues one replay of g.
func (c *Ctx) LaunchGraph(g *Graph) error {
	return c.dev.d.check("cuGraphLaunch", c.dev.d.cuGraphLaunch(g.exec, c.dev.stream))
}

// DestroyGraph frees g.
func (c *Ctx) DestroyGraph(g *Graph) {
	if g != nil {
		c.dev.d.cuGraphExecDestroy(g.exec)
		c.dev.d.cuGraphDestroy(g.graph)
	}
}

// SideStream creates the side stream and the events that fork work onto it
// and join it back, once; call it outside a graph capture (at load).
func (c *Ctx) SideStream() error {
	dev := c.dev
	if dev.side != 0 {
		return nil
	}
	const nonBlocking, disableTiming = 1, 2
	var side, forked, joined handle
	if err := dev.d.check("cuStreamCreate(side)", dev.d.cuStreamCreate(&side, nonBlocking)); err != nil {
		return err
	}
	if err := dev.d.check("cuEventCreate(fork)", dev.d.cuEventCreate(&forked, disableTiming)); err != nil {
		dev.d.cuStreamDestroy(side)
		return err
	}
	if err := dev.d.check("cuEventCreate(join)", dev.d.cuEventCreate(&joined, disableTiming)); err != nil {
		dev.d.cuEventDestroy(forked)
		dev.d.cuStreamDestroy(side)
		return err
	}
	dev.side, dev.forked, dev.joined = side, forked, joined
	return nil
}

// Side is c with its launches on the side stream (SideStream made it).
func (c *Ctx) Side() *Ctx { return &Ctx{dev: c.dev, side: true} }

// Fork makes the side stream's next work wait for everything enqueued on
// the stream so far: an event recorded on the stream, waited for on the
// side stream. Inside a graph capture this is how the side stream joins
// the capture (CUDA's fork rule), and the side branch's kernels become
// nodes that depend on the stream's last one.
func (c *Ctx) Fork() error {
	dev := c.dev
	if dev.side == 0 {
		return fmt.Errorf("cuda: Fork without a side stream (SideStream)")
	}
	if err := dev.d.check("cuEventRecord(fork)", dev.d.cuEventRecord(dev.forked, dev.stream)); err != nil {
		return err
	}
	return dev.d.check("cuStreamWaitEvent(side)", dev.d.cuStreamWaitEvent(dev.side, dev.forked, 0))
}

// Join makes the stream's next work wait for everything enqueued on the
// side stream so far. A capture must join every fork before EndCapture
// (else cuStreamEndCapture fails as unjoined); the next launch on the
// stream takes no PDL, so it waits for both branches in full.
func (c *Ctx) Join() error {
	dev := c.dev
	if dev.side == 0 {
		return fmt.Errorf("cuda: Join without a side stream (SideStream)")
	}
	if err := dev.d.check("cuEventRecord(join)", dev.d.cuEventRecord(dev.joined, dev.side)); err != nil {
		return err
	}
	if err := dev.d.check("cuStreamWaitEvent(join)", dev.d.cuStreamWaitEvent(dev.stream, dev.joined, 0)); err != nil {
		return err
	}
	dev.plainNext = true
	return nil
}

// Event marks a point in the stream, for timing.
type Event struct{ h handle }

// Record creates an event and records it on the stream.
func (c *Ctx) Record() (*Event, error) {
	e := &Event{}
	if err := c.dev.d.check("cuEventCreate", c.dev.d.cuEventCreate(&e.h, 0)); err != nil {
		return nil, err
	}
	return e, c.dev.d.check("cuEventRecord", c.dev.d.cuEventRecord(e.h, c.dev.stream))
}

// Destroy frees an event.
func (c *Ctx) Destroy(e *Event) { c.dev.d.cuEventDestroy(e.h) }

// Elapsed waits for end and returns the milliseconds from start to end.
func (c *Ctx) Elapsed(start, end *Event) (float64, error) {
	if err := c.dev.d.check("cuEventSynchronize", c.dev.d.cuEventSynchronize(end.h)); err != nil {
		return 0, err
	}
	var ms float32
	err := c.dev.d.check("cuEventElapsedTime", c.dev.d.cuEventElapsedTime(&ms, start.h, end.h))
	return float64(ms), err
}
