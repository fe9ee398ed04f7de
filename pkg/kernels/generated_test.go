package kernels

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedAssemblyIsCurrent fails when a generator under _asm has
// changed and the assembly it writes was not regenerated: run
// `go generate ./pkg/kernels` and commit the .s files with the change.
func TestGeneratedAssemblyIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run the generators")
	}
	for _, gen := range []struct {
		dir, file string
		flagOut   bool // writes the file itself (-o) rather than to stdout
	}{
		{"./_asm/amd64", "qint_amd64.s", false},
		{"./_asm/arm64", "qint_arm64.s", false},
		{"./_asm/amd64float", "float_amd64.s", true},
	} {
		t.Run(gen.file, func(t *testing.T) {
			want, err := os.ReadFile(gen.file)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "run", gen.dir)
			tmp := filepath.Join(t.TempDir(), gen.file)
			if gen.flagOut {
				cmd.Args = append(cmd.Args, "-o", tmp)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("go run %s: %v\n%s", gen.dir, err, stderr.Bytes())
			}
			if gen.flagOut {
				if got, err = os.ReadFile(tmp); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what %s writes now: run `go generate ./pkg/kernels` and commit it", gen.file, gen.dir)
			}
		})
	}
}
