package expertcache

import (
	"os/exec"
	"strings"
	"testing"
)

// The expert cache serves every model architecture, so it must not depend
// on any of them (it speaks package moe's contract).
func TestExpertCacheImportsNoModelPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, model := range []string{"/pkg/runtime/qwen35", "/pkg/runtime/qwen38"} {
			if strings.HasSuffix(dep, model) {
				t.Errorf("pkg/expertcache depends on %s; use the types of pkg/runtime/moe", dep)
			}
		}
	}
}
