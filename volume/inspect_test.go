package volume

import (
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dumpe2fs returns dumpe2fs -h's "Key: value" lines as a map.
func dumpe2fs(t *testing.T, img string) map[string]string {
	t.Helper()
	out := sh(t, "dumpe2fs", "-h", img)
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestInspectMatchesDumpe2fs checks the Go superblock parser against
// e2fsprogs' own reading of the same image.
func TestInspectMatchesDumpe2fs(t *testing.T) {
	requireTools(t, "mkfs.ext4", "dumpe2fs", "debugfs")
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "v.img")
	created, err := Create(ctx, p, CreateOptions{Size: 3 << 30, Label: "golden-1", Owner: &Owner{UID: 100000, GID: 100001}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Features, created.Features) || info.UUID != created.UUID {
		t.Errorf("Create returned %+v, Inspect %+v", created, info)
	}
	d := dumpe2fs(t, p)
	num := func(k string) int64 {
		n, err := strconv.ParseInt(d[k], 10, 64)
		if err != nil {
			t.Fatalf("dumpe2fs %q = %q", k, d[k])
		}
		return n
	}
	bs := num("Block size")
	checks := []struct {
		what      string
		got, want any
	}{
		{"block size", info.BlockSize, bs},
		{"size", info.Size, num("Block count") * bs},
		{"free", info.Free, num("Free blocks") * bs},
		{"used", info.Used, (num("Block count") - num("Free blocks")) * bs},
		{"inodes", info.Inodes, num("Inode count")},
		{"free inodes", info.FreeInodes, num("Free inodes")},
		{"mount count", int64(info.MountCount), num("Mount count")},
		{"label", info.Label, d["Filesystem volume name"]},
		{"uuid", info.UUID, d["Filesystem UUID"]},
		{"features", strings.Join(info.Features, " "), d["Filesystem features"]},
		{"clean", info.Clean, d["Filesystem state"] == "clean"},
		{"size option", info.Size, int64(3 << 30)},
		{"file size", info.FileSize, int64(3 << 30)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: Inspect %v, dumpe2fs %v", c.what, c.got, c.want)
		}
	}
	if info.Created.IsZero() || !info.LastMountTime.IsZero() || info.LastMounted != "" {
		t.Errorf("times: created %v, last mount %v on %q", info.Created, info.LastMountTime, info.LastMounted)
	}
	for _, f := range []string{"has_journal", "extent", "metadata_csum", "64bit"} {
		if !slices.Contains(info.Features, f) {
			t.Errorf("feature %s missing from %v", f, info.Features)
		}
	}
	if d["Reserved block count"] != "0" {
		t.Errorf("reserved blocks = %s, want 0 (-m 0)", d["Reserved block count"])
	}
	if info.Allocated > 8<<20 {
		t.Errorf("a fresh 3 GiB image allocates %s, want a sparse file (lazy_journal_init)", FormatSize(info.Allocated))
	}
	root := sh(t, "debugfs", "-R", "stat /", p)
	if !strings.Contains(root, "User: 100000   Group: 100001") {
		t.Errorf("root owner (root_owner option): %s", root)
	}
	if err := Check(ctx, p); err != nil {
		t.Error(err)
	}
}

// TestInspectRejects covers the typed errors for files that are not
// usable images; each names the file and suggests a fix.
func TestInspectRejects(t *testing.T) {
	ctx := context.Background()
	good := mkImage(t, 64<<20)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	b := make([]byte, 1<<20)
	rand.Read(b)
	if err := os.WriteFile(garbage, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Inspect(ctx, garbage)
	assertIs(t, err, ErrNotExt4, garbage, "gvx volume create", "0xef53")

	tiny := filepath.Join(dir, "tiny")
	os.WriteFile(tiny, []byte("hello"), 0o600)
	_, err = Inspect(ctx, tiny)
	assertIs(t, err, ErrTruncated, tiny, "5 bytes")

	cut := filepath.Join(dir, "cut.img")
	copyFile(t, good, cut)
	if err := os.Truncate(cut, 32<<20); err != nil {
		t.Fatal(err)
	}
	_, err = Inspect(ctx, cut)
	assertIs(t, err, ErrTruncated, cut, "33554432 bytes", "67108864", "clone it again")

	bad := filepath.Join(dir, "bad.img")
	copyFile(t, good, bad)
	f, _ := os.OpenFile(bad, os.O_RDWR, 0)
	f.WriteAt([]byte("X"), superblockOffset+offVolumeName) // checksum now stale
	f.Close()
	_, err = Inspect(ctx, bad)
	assertIs(t, err, ErrBadSuperblock, bad, "checksum", "e2fsck")

	_, err = Inspect(ctx, filepath.Join(dir, "missing.img"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	_, err = Inspect(ctx, dir)
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
}

// TestDirtySuperblock: an image whose state is not clean is reported by
// Inspect and refused by Clone, Acquire and Check unless forced.
func TestDirtySuperblock(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	for _, c := range []struct {
		state int
		want  string
	}{{0, "not unmounted cleanly"}, {3, "errors recorded"}} {
		setState(t, img, c.state)
		info, err := Inspect(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if info.Clean || !strings.Contains(info.State, c.want) {
			t.Errorf("state %d: Clean %v, State %q, want %q", c.state, info.Clean, info.State, c.want)
		}
		dst := filepath.Join(t.TempDir(), "clone.img")
		_, err = Clone(ctx, img, dst, CloneOptions{})
		assertIs(t, err, ErrNotClean, img, c.want, "--force")
		if _, serr := os.Stat(dst); !os.IsNotExist(serr) {
			t.Errorf("refused clone left %s: %v", dst, serr)
		}
		_, err = Acquire(ctx, img, AcquireOptions{})
		assertIs(t, err, ErrNotClean, img, "e2fsck -fp")
		if err := Check(ctx, img); err == nil {
			t.Error("Check passed a dirty image")
		}
	}
	dst := filepath.Join(t.TempDir(), "forced.img")
	if _, err := Clone(ctx, img, dst, CloneOptions{Force: true}); err != nil {
		t.Fatalf("forced clone: %v", err)
	}
	if sha(t, dst) != sha(t, img) {
		t.Error("forced clone differs from its source")
	}
	l, err := Acquire(ctx, img, AcquireOptions{Force: true})
	if err != nil {
		t.Fatalf("forced acquire: %v", err)
	}
	if l.Info().Clean {
		t.Error("lease info says clean")
	}
	l.Release()
}
