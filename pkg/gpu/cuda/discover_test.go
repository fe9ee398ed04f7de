package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeFS is a set of files and an environment.
type fakeFS struct {
	files map[string]bool
	env   map[string]string
}

func (f fakeFS) finder() finder {
	return finder{
		getenv: func(k string) string { return f.env[k] },
		exists: func(p string) bool { return f.files[p] },
		glob: func(pat string) []string {
			var out []string
			for p := range f.files {
				if ok, _ := filepath.Match(pat, p); ok {
					out = append(out, p)
				}
			}
			for p := range f.files { // directory patterns: match a parent of a file
				for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
					if ok, _ := filepath.Match(pat, d); ok {
						out = append(out, d)
					}
				}
			}
			return dedup(out)
		},
	}
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func TestFindLibraries(t *testing.T) {
	tests := []struct {
		name               string
		files              []string
		env                map[string]string
		driver, nvrtc, bis string
		missing            bool
	}{
		{
			name:   "toolkit in /usr/local/cuda, driver system-wide",
			files:  []string{"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc-builtins.so.13.0", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
			driver: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", nvrtc: "/usr/local/cuda/lib64/libnvrtc.so.13", bis: "/usr/local/cuda/lib64/libnvrtc-builtins.so.13.0",
		},
		{
			name:   "override directory wins over LD_LIBRARY_PATH",
			files:  []string{"/opt/a/libnvrtc.so.12", "/opt/b/libnvrtc.so.13", "/opt/b/libcuda.so.1"},
			env:    map[string]string{LibDirEnv: "/opt/b", "LD_LIBRARY_PATH": "/opt/a"},
			driver: "/opt/b/libcuda.so.1", nvrtc: "/opt/b/libnvrtc.so.13",
		},
		{
			name:   "LD_LIBRARY_PATH, driver left to the loader",
			files:  []string{"/opt/a/libnvrtc.so.12"},
			env:    map[string]string{"LD_LIBRARY_PATH": "/x:/opt/a"},
			driver: "libcuda.so.1", nvrtc: "/opt/a/libnvrtc.so.12",
		},
		{
			name:   "newest versioned toolkit, newest soname",
			files:  []string{"/usr/local/cuda-12.4/lib64/libnvrtc.so.12", "/usr/local/cuda-13.0/lib64/libnvrtc.so.13", "/usr/local/cuda-13.0/lib64/libnvrtc.so"},
			driver: "libcuda.so.1", nvrtc: "/usr/local/cuda-13.0/lib64/libnvrtc.so.13",
		},
		{
			name:   "pip wheel in a virtual environment",
			files:  []string{"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"},
			driver: "libcuda.so.1", nvrtc: "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		},
		{name: "nothing installed", missing: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeFS{files: map[string]bool{}, env: tc.env}
			for _, f := range tc.files {
				fs.files[f] = true
			}
			libs, err := fs.finder().find()
			if tc.missing {
				var me *MissingError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), "NVRTC") || !strings.Contains(err.Error(), LibDirEnv) || !strings.Contains(err.Error(), "--engine cpu") {
					t.Fatalf("got %v, want a MissingError naming NVRTC, %s and --engine cpu", err, LibDirEnv)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if libs.Driver != tc.driver || libs.NVRTC != tc.nvrtc || libs.Builtins != tc.bis {
				t.Errorf("got %+v, want driver %s nvrtc %s builtins %q", libs, tc.driver, tc.nvrtc, tc.bis)
			}
		})
	}
}

func TestCacheKeyChangesWithEveryInput(t *testing.T) {
	base := CacheKey("src", []string{"-a"}, 90, 13, 0)
	for name, k := range map[string]string{
		"source":  CacheKey("src2", []string{"-a"}, 90, 13, 0),
		"options": CacheKey("src", []string{"-b"}, 90, 13, 0),
		"arch":    CacheKey("src", []string{"-a"}, 89, 13, 0),
		"nvrtc":   CacheKey("src", []string{"-a"}, 90, 13, 1),
	} {
		if k == base {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
}

func TestCacheRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if readCache(dir, "k") != nil {
		t.Fatal("empty cache returned a cubin")
	}
	writeCache(dir, "k", []byte("cubin"))
	if string(readCache(dir, "k")) != "cubin" {
		t.Fatal("cache lost the cubin")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// On a machine without a driver, Open fails with a message naming what is
// missing (and does not panic); with one, it reports the device.
func TestOpen(t *testing.T) {
	dev, err := Open(0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	defer dev.Close()
	t.Logf("%s sm_%d, %d SMs, %.1f GiB, driver %d, NVRTC %d.%d (%s)", dev.Name, dev.Arch, dev.SMs, float64(dev.TotalMem)/(1<<30), dev.Driver, dev.NVRTCVer[0], dev.NVRTCVer[1], dev.Libs.NVRTC)
}

// A closure that ends its goroutine inside Do (a test's t.Fatal there)
// returns from Do, and the device goes on serving on a new goroutine with
// its context current: later Do calls run instead of hanging the binary.
func TestDoAfterGoexit(t *testing.T) {
	dev, err := Open(0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	defer dev.Close()
	dev.Do(func(c *Ctx) error {
		runtime.Goexit()
		return nil
	})
	for i := range 2 {
		err := dev.Do(func(c *Ctx) error {
			p, err := c.AllocCopy([]byte{1, 2, 3, 4})
			if err != nil {
				return err
			}
			defer c.Free(p)
			got := make([]byte, 4)
			if err := c.DtoH(got, p); err != nil {
				return err
			}
			if got[3] != 4 {
				return fmt.Errorf("read back %v", got)
			}
			return c.Sync()
		})
		if err != nil {
			t.Fatalf("Do %d after a closure's Goexit: %v", i, err)
		}
	}
}
