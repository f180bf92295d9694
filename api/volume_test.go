package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadVolumes: a restore target's volume list reads back as written;
// no file is no volumes; a relative path or bad JSON is an error naming
// the file.
func TestReadVolumes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vols.json")
	if vols, err := ReadVolumes(path); err != nil || vols != nil {
		t.Fatalf("no file: %v %v, want none", vols, err)
	}
	want := []Volume{{Image: "/s/0.ext4", Open: "/proc/1/fd/7", Staging: "/run/v/0", Destination: "/work"}}
	if err := WriteJSON(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadVolumes(path)
	if err != nil || len(got) != 1 || got[0] != want[0] {
		t.Fatalf("read back %+v %v, want %+v", got, err, want)
	}
	for name, data := range map[string]string{
		"relative destination": `[{"image":"/s/0.ext4","staging":"/run/v/0","destination":"work"}]`,
		"relative image":       `[{"image":"0.ext4","staging":"/run/v/0","destination":"/work"}]`,
		"not JSON":             `[{`,
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadVolumes(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s", name, err, path)
		}
	}
}
