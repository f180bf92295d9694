package digest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := File(p)
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; err != nil || got != want {
		t.Fatalf("File = %q, %v; want %s", got, err, want)
	}
	if !Valid(got) || Valid(got[1:]) || Valid("BA"+got[2:]) || Valid("../"+got[3:]) {
		t.Fatal("Valid")
	}
	if _, err := File(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Fatalf("a missing file: %v", err)
	}
}
