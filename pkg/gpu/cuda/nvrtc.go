package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

type nvrtc struct {
	path                   string
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcCreateProgram     func(p *uintptr, src, name string, nh int32, headers, includes unsafe.Pointer) int32
	nvrtcCompileProgram    func(p uintptr, n int32, opts unsafe.Pointer) int32
	nvrtcGetProgramLogSize func(p uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(p uintptr, log *byte) int32
	nvrtcGetCUBINSize      func(p uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(p uintptr, out *byte) int32
	nvrtcDestroyProgram    func(p *uintptr) int32
	nvrtcGetErrorString    func(r int32) *byte
}

func loadNVRTC(libs Libraries) (*nvrtc, error) {
	if libs.Builtins != "" {
		// libnvrtc dlopens its builtins by soname; loading them first from
		// the same directory makes that find them whatever LD_LIBRARY_PATH is.
		if _, err := purego.Dlopen(libs.Builtins, purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			return nil, fmt.Errorf("NVRTC builtins %s could not be loaded: %v", libs.Builtins, err)
		}
	}
	h, err := purego.Dlopen(libs.NVRTC, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("NVRTC could not be loaded from %s: %v; set %s to the CUDA toolkit's lib64, or use --engine cpu", libs.NVRTC, err, LibDirEnv)
	}
	n := &nvrtc{path: libs.NVRTC}
	for name, fp := range map[string]any{
		"nvrtcVersion": &n.nvrtcVersion, "nvrtcCreateProgram": &n.nvrtcCreateProgram, "nvrtcCompileProgram": &n.nvrtcCompileProgram,
		"nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize, "nvrtcGetProgramLog": &n.nvrtcGetProgramLog,
		"nvrtcGetCUBINSize": &n.nvrtcGetCUBINSize, "nvrtcGetCUBIN": &n.nvrtcGetCUBIN,
		"nvrtcDestroyProgram": &n.nvrtcDestroyProgram, "nvrtcGetErrorString": &n.nvrtcGetErrorString,
	} {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return nil, fmt.Errorf("%s has no %s (NVRTC 12 or newer is needed): %v", libs.NVRTC, name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return n, nil
}

func (n *nvrtc) version() (int, int) {
	var ma, mi int32
	n.nvrtcVersion(&ma, &mi)
	return int(ma), int(mi)
}

// CompileOptions are the NVRTC flags every kernel gets besides the target:
// no fused multiply-adds, so each product and sum rounds on its own as in
// the Go references (the bitwise contracts of pkg/kernels depend on it).
var CompileOptions = []string{"--std=c++17", "--fmad=false", "-default-device", "-lineinfo"}

// Compile builds src for sm_<arch> with NVRTC alone, no driver or GPU: it
// checks, on a machine that has NVRTC but no GPU, that kernel sources
// compile with the engine's options.
func Compile(libs Libraries, src, name string, arch int) ([]byte, error) {
	rt, err := loadNVRTC(libs)
	if err != nil {
		return nil, err
	}
	return rt.compile(src, name, arch, nil)
}

// compile builds src for sm_<arch> into a cubin.
func (n *nvrtc) compile(src, name string, arch int, extra []string) ([]byte, error) {
	var prog uintptr
	if r := n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil); r != 0 {
		return nil, fmt.Errorf("nvrtcCreateProgram(%s): %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	defer n.nvrtcDestroyProgram(&prog)
	opts := append([]string{fmt.Sprintf("--gpu-architecture=sm_%d", arch)}, CompileOptions...)
	opts = append(opts, extra...)
	cstrs := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		cstrs[i] = append([]byte(o), 0)
		ptrs[i] = &cstrs[i][0]
	}
	r := n.nvrtcCompileProgram(prog, int32(len(opts)), unsafe.Pointer(&ptrs[0]))
	runtime.KeepAlive(cstrs)
	var logN uint64
	n.nvrtcGetProgramLogSize(prog, &logN)
	var log string
	if logN > 1 {
		buf := make([]byte, logN)
		n.nvrtcGetProgramLog(prog, &buf[0])
		log = string(buf[:logN-1])
	}
	if r != 0 {
		return nil, fmt.Errorf("NVRTC could not compile %s for sm_%d: %s\n%s", name, arch, goString(n.nvrtcGetErrorString(r)), log)
	}
	var size uint64
	if r := n.nvrtcGetCUBINSize(prog, &size); r != 0 || size == 0 {
		return nil, fmt.Errorf("nvrtcGetCUBINSize(%s): %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	cubin := make([]byte, size)
	if r := n.nvrtcGetCUBIN(prog, &cubin[0]); r != 0 {
		return nil, fmt.Errorf("nvrtcGetCUBIN(%s): %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	return cubin, nil
}

// CacheKey names a cubin by everything that changes it: the source, the
// options, the target and the compiler's version.
func CacheKey(src string, opts []string, arch, nvrtcMajor, nvrtcMinor int) string {
	h := sha256.New()
	fmt.Fprintf(h, "sm_%d nvrtc %d.%d\n", arch, nvrtcMajor, nvrtcMinor)
	for _, o := range opts {
		fmt.Fprintf(h, "%s\n", o)
	}
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// CacheDir is where compiled kernels are kept: $NVMAI_CUBIN_CACHE, else the
// user's cache directory under nvmai/cubin.
func CacheDir() string {
	if d := os.Getenv("NVMAI_CUBIN_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "nvmai", "cubin")
}

// readCache returns the cached cubin for key, or nil.
func readCache(dir, key string) []byte {
	b, err := os.ReadFile(filepath.Join(dir, key+".cubin"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// writeCache stores a cubin through a temporary file and a rename, so a
// reader never sees half of one. Failures only cost a recompile later.
func writeCache(dir, key string, cubin []byte) {
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	f, err := os.CreateTemp(dir, key+".*.tmp")
	if err != nil {
		return
	}
	_, werr := f.Write(cubin)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), filepath.Join(dir, key+".cubin")) != nil {
		os.Remove(f.Name())
	}
}
