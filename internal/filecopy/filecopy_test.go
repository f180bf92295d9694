package filecopy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("longer old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := File(src, dst, 0o555); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "bytes" {
		t.Errorf("dst holds %q, %v; want the source's bytes only", b, err)
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o555 {
		t.Errorf("dst: %v, %v; want mode 0555", st, err)
	}
	if err := File(filepath.Join(dir, "missing"), filepath.Join(dir, "x"), 0o644); !os.IsNotExist(err) {
		t.Errorf("a missing source: %v, want not-exist", err)
	}
}
