package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Result is a CUresult.
type Result int32

// DriverError is a failed driver call, named by cuGetErrorName.
type DriverError struct {
	Call string
	Code Result
	Name string
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda: %s failed: %s (%d)", e.Call, e.Name, e.Code)
}

// Fatal reports whether the error leaves the context unusable (a kernel
// fault): the process must not go on using the device.
func (e *DriverError) Fatal() bool {
	switch e.Code {
	case 700, 701, 702, 704, 714, 715, 716, 717, 718, 719: // illegal address, launch out of resources/timeout, …, launch failed
		return true
	}
	return false
}

// Device pointers, handles.
type (
	DevicePtr uint64
	handle    = uintptr
)

// driver holds the dlopened functions. Every one returns a CUresult.
type driver struct {
	cuInit                      func(flags uint32) Result
	cuDriverGetVersion          func(v *int32) Result
	cuDeviceGet                 func(dev *int32, ordinal int32) Result
	cuDeviceGetCount            func(n *int32) Result
	cuDeviceGetName             func(name *byte, n int32, dev int32) Result
	cuDeviceGetAttribute        func(v *int32, attr int32, dev int32) Result
	cuDeviceTotalMem            func(b *uint64, dev int32) Result
	cuDevicePrimaryCtxRetain    func(ctx *handle, dev int32) Result
	cuDevicePrimaryCtxRelease   func(dev int32) Result
	cuCtxSetCurrent             func(ctx handle) Result
	cuCtxSynchronize            func() Result
	cuMemGetInfo                func(free, total *uint64) Result
	cuMemAlloc                  func(p *DevicePtr, n uint64) Result
	cuMemFree                   func(p DevicePtr) Result
	cuMemHostAlloc              func(p *unsafe.Pointer, n uint64, flags uint32) Result
	cuMemHostGetDevicePointer   func(d *DevicePtr, p unsafe.Pointer, flags uint32) Result
	cuMemFreeHost               func(p unsafe.Pointer) Result
	cuMemHostRegister           func(p unsafe.Pointer, n uint64, flags uint32) Result
	cuMemHostUnregister         func(p unsafe.Pointer) Result
	cuMemcpyDtoH                func(dst unsafe.Pointer, src DevicePtr, n uint64) Result
	cuMemcpyDtoDAsync           func(dst, src DevicePtr, n uint64, s handle) Result
	cuMemcpyHtoDAsync           func(dst DevicePtr, src unsafe.Pointer, n uint64, s handle) Result
	cuMemsetD32Async            func(dst DevicePtr, v uint32, n uint64, s handle) Result
	cuStreamCreate              func(s *handle, flags uint32) Result
	cuStreamDestroy             func(s handle) Result
	cuStreamSynchronize         func(s handle) Result
	cuStreamWaitEvent           func(s, e handle, flags uint32) Result
	cuEventCreate               func(e *handle, flags uint32) Result
	cuEventDestroy              func(e handle) Result
	cuEventRecord               func(e, s handle) Result
	cuEventSynchronize          func(e handle) Result
	cuEventElapsedTime          func(ms *float32, start, end handle) Result
	cuModuleLoadData            func(m *handle, image unsafe.Pointer) Result
	cuModuleUnload              func(m handle) Result
	cuModuleGetFunction         func(f *handle, m handle, name string) Result
	cuFuncSetAttribute          func(f handle, attr int32, v int32) Result
	cuLaunchKernel              func(f handle, gx, gy, gz, bx, by, bz, smem uint32, s handle, params unsafe.Pointer, extra unsafe.Pointer) Result
	cuStreamBeginCapture        func(s handle, mode int32) Result
	cuStreamEndCapture          func(s handle, g *handle) Result
	cuGraphInstantiateWithFlags func(e *handle, g handle, flags uint64) Result
	cuGraphLaunch               func(e, s handle) Result
	cuGraphExecDestroy          func(e handle) Result
	cuGraphDestroy              func(g handle) Result
	cuGraphGetNodes             func(g handle, nodes unsafe.Pointer, n *uint64) Result
	cuGetErrorName              func(r Result, s **byte) Result
	// cuLaunchKernelEx is optional (programmatic dependent launch); nil
	// when the driver lacks it.
	cuLaunchKernelEx func(cfg unsafe.Pointer, f handle, params unsafe.Pointer, extra unsafe.Pointer) Result
}

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// symbols maps each field to its exported name (the _v2 ABI where the
// driver has one).
func (d *driver) symbols() map[string]any {
	return map[string]any{
		"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion, "cuDeviceGet": &d.cuDeviceGet,
		"cuDeviceGetCount": &d.cuDeviceGetCount, "cuDeviceGetName": &d.cuDeviceGetName,
		"cuDeviceGetAttribute": &d.cuDeviceGetAttribute, "cuDeviceTotalMem_v2": &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent": &d.cuCtxSetCurrent, "cuCtxSynchronize": &d.cuCtxSynchronize,
		"cuMemGetInfo_v2": &d.cuMemGetInfo, "cuMemAlloc_v2": &d.cuMemAlloc, "cuMemFree_v2": &d.cuMemFree,
		"cuMemcpyDtoH_v2": &d.cuMemcpyDtoH,
		"cuMemHostAlloc":  &d.cuMemHostAlloc, "cuMemHostGetDevicePointer_v2": &d.cuMemHostGetDevicePointer,
		"cuMemFreeHost":                          &d.cuMemFreeHost,
		"cuMemHostRegister_v2|cuMemHostRegister": &d.cuMemHostRegister, "cuMemHostUnregister": &d.cuMemHostUnregister,
		"cuMemcpyDtoDAsync_v2": &d.cuMemcpyDtoDAsync, "cuMemcpyHtoDAsync_v2": &d.cuMemcpyHtoDAsync,
		"cuMemsetD32Async": &d.cuMemsetD32Async,
		"cuStreamCreate":   &d.cuStreamCreate, "cuStreamDestroy_v2": &d.cuStreamDestroy, "cuStreamSynchronize": &d.cuStreamSynchronize,
		"cuStreamWaitEvent": &d.cuStreamWaitEvent,
		"cuEventCreate":     &d.cuEventCreate, "cuEventDestroy_v2": &d.cuEventDestroy, "cuEventRecord": &d.cuEventRecord,
		"cuEventSynchronize": &d.cuEventSynchronize, "cuEventElapsedTime_v2|cuEventElapsedTime": &d.cuEventElapsedTime,
		"cuModuleLoadData": &d.cuModuleLoadData, "cuModuleUnload": &d.cuModuleUnload, "cuModuleGetFunction": &d.cuModuleGetFunction,
		"cuFuncSetAttribute": &d.cuFuncSetAttribute, "cuLaunchKernel": &d.cuLaunchKernel,
		"cuStreamBeginCapture_v2": &d.cuStreamBeginCapture, "cuStreamEndCapture": &d.cuStreamEndCapture,
		"cuGraphInstantiateWithFlags": &d.cuGraphInstantiateWithFlags, "cuGraphLaunch": &d.cuGraphLaunch,
		"cuGraphExecDestroy": &d.cuGraphExecDestroy, "cuGraphDestroy": &d.cuGraphDestroy, "cuGraphGetNodes": &d.cuGraphGetNodes,
		"cuGetErrorName": &d.cuGetErrorName,
	}
}

func loadDriver(path string) (*driver, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("the NVIDIA driver (libcuda.so.1) could not be loaded from %s: %v; install the NVIDIA driver, or set %s, or use --engine cpu", path, err, LibDirEnv)
	}
	d := &driver{}
	for name, fp := range d.symbols() {
		var sym uintptr
		for _, alt := range strings.Split(name, "|") {
			if sym, err = purego.Dlsym(h, alt); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s has no %s (driver too old? CUDA 12 or newer is needed): %v", path, name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	if sym, err := purego.Dlsym(h, "cuLaunchKernelEx"); err == nil {
		purego.RegisterFunc(&d.cuLaunchKernelEx, sym)
	}
	return d, nil
}

// check turns a CUresult into an error naming the call.
func (d *driver) check(call string, r Result) error {
	if r == 0 {
		return nil
	}
	name := "unknown error"
	var s *byte
	if d.cuGetErrorName(r, &s) == 0 && s != nil {
		name = goString(s)
	}
	return &DriverError{Call: call, Code: r, Name: name}
}

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
