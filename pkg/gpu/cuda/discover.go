// Package cuda binds the CUDA driver API and NVRTC without cgo: both
// libraries are dlopened at run time through purego, so binaries stay
// CGO_ENABLED=0 and build (and run their CPU paths) on machines with no
// NVIDIA driver at all.
//
// Every driver call runs on one goroutine locked to its OS thread (the
// device goroutine, see Device.Do): a CUDA context is current per OS thread,
// and goroutines migrate.
package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LibDirEnv names a directory searched before every other place for both
// libcuda.so.1 and libnvrtc.so.*.
const LibDirEnv = "NVMAI_CUDA_LIB_DIR"

// Libraries are the absolute paths of the shared objects Open loads.
type Libraries struct {
	Driver   string // libcuda.so.1, or its soname when only the loader can find it
	NVRTC    string
	Builtins string // libnvrtc-builtins.so.*, preloaded beside NVRTC (may be empty)
}

// finder abstracts the filesystem and environment so discovery can be
// tested with fakes.
type finder struct {
	getenv func(string) string
	exists func(string) bool
	glob   func(string) []string
}

func osFinder() finder {
	return finder{
		getenv: os.Getenv,
		exists: func(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() },
		glob:   func(p string) []string { m, _ := filepath.Glob(p); return m },
	}
}

// MissingError says which library could not be found and where it looked.
type MissingError struct {
	Library string   // "the NVIDIA driver (libcuda.so.1)" or "NVRTC (libnvrtc.so.*)"
	Looked  []string // directories searched
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found (searched %s and the system loader); install the NVIDIA driver / CUDA toolkit, or set %s to the directory that holds it, or use --engine cpu",
		e.Library, strings.Join(e.Looked, ", "), LibDirEnv)
}

// searchDirs lists the directories in the order they are searched.
func (f finder) searchDirs() []string {
	var dirs []string
	add := func(d string) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	add(f.getenv(LibDirEnv))
	for _, d := range filepath.SplitList(f.getenv("LD_LIBRARY_PATH")) {
		add(d)
	}
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := f.getenv(env); h != "" {
			add(filepath.Join(h, "lib64"))
			add(filepath.Join(h, "lib"))
		}
	}
	add("/usr/local/cuda/lib64")
	cudas := f.glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(cudas))) // newest toolkit first
	dirs = append(dirs, cudas...)
	// pip wheels (nvidia-cuda-nvrtc), in virtual environments and user sites.
	for _, pat := range []string{
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/cu1*/lib",
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu1*/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib",
		"/usr/lib/python3/dist-packages/nvidia/cu1*/lib",
	} {
		dirs = append(dirs, f.glob(pat)...)
	}
	if h := f.getenv("HOME"); h != "" {
		dirs = append(dirs, f.glob(filepath.Join(h, ".local/lib/python3*/site-packages/nvidia/cu1*/lib"))...)
	}
	for _, d := range []string{"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib"} {
		add(d)
	}
	return dirs
}

// find locates the driver and NVRTC. The driver may be left to the system
// loader (its soname), NVRTC may not: libnvrtc opens its builtins library
// by soname, so we preload that from NVRTC's own directory.
func (f finder) find() (Libraries, error) {
	dirs := f.searchDirs()
	var libs Libraries
	for _, d := range dirs {
		if p := filepath.Join(d, "libcuda.so.1"); f.exists(p) {
			libs.Driver = p
			break
		}
	}
	if libs.Driver == "" {
		libs.Driver = "libcuda.so.1" // the loader's own search (ld.so.cache)
	}
	for _, d := range dirs {
		if p := newestNVRTC(f, d); p != "" {
			libs.NVRTC = p
			libs.Builtins = newest(f.glob(filepath.Join(d, "libnvrtc-builtins.so.*")))
			break
		}
	}
	if libs.NVRTC == "" {
		return libs, &MissingError{Library: "NVRTC (libnvrtc.so.12 or .13)", Looked: dirs}
	}
	return libs, nil
}

func newestNVRTC(f finder, dir string) string {
	var cands []string
	for _, m := range f.glob(filepath.Join(dir, "libnvrtc.so*")) {
		if !strings.Contains(filepath.Base(m), "builtins") {
			cands = append(cands, m)
		}
	}
	return newest(cands)
}

// newest picks the name that sorts last: libnvrtc.so.13 over .so.12 (and a
// versioned file over the bare .so link, which may be a dev symlink only).
func newest(names []string) string {
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return names[len(names)-1]
}

// FindLibraries locates the driver and NVRTC on this machine.
func FindLibraries() (Libraries, error) { return osFinder().find() }
