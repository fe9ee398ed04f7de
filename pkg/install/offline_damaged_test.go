package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/download"
)

// probe C11: `nvmai-install --offline` converted a cached shard whose bytes
// no longer matched its blob's sha256 and reported "installed and
// verified". The damaged blob is refused before anything is converted.
func TestOfflineInstallRefusesADamagedBlob(t *testing.T) {
	client, cacheDir, commit := offlineHub(t)
	snapDir := download.SnapshotDir(cacheDir, repo, commit)
	shards, _ := filepath.Glob(filepath.Join(snapDir, "*.safetensors"))
	if len(shards) == 0 {
		t.Fatalf("no shards in %s", snapDir)
	}
	blob, err := filepath.EvalSymlinks(shards[0])
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0x01 // a tensor byte: the header still parses
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	entry, err := CustomEntry(repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	models := t.TempDir()
	_, err = Run(context.Background(), entry, []int{4},
		Options{ModelsDir: models, CacheDir: cacheDir, Client: client, Offline: true, Threads: 2})
	var be *download.CachedBlobError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), filepath.Base(shards[0])) || !strings.Contains(err.Error(), blob) {
		t.Fatalf("offline install over a damaged blob: %v; want a *CachedBlobError naming %s", err, blob)
	}
	if entries, _ := os.ReadDir(models); len(entries) != 0 {
		t.Errorf("the refused install left %d entries in %s", len(entries), models)
	}
}
