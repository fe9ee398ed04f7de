package expertcache

import (
	"os/exec"
	"strings"
	"testing"
)

// The expert cache serves every model architecture and sits below the
// runtime that opens it, so it must depend on neither (it speaks package
// model's expert contract).
func TestExpertCacheImportsNoModelPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		// runtime/sample is a leaf (the standard library only) that model's
		// Sampler names; it moves to pkg/sample with the layout (#36 item 3).
		if strings.Contains(dep, "/pkg/runtime") && !strings.HasSuffix(dep, "/pkg/sample") {
			t.Errorf("pkg/expertcache depends on %s; use the types of pkg/model", dep)
		}
	}
}
