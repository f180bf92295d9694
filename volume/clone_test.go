package volume

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestVolumeOnXFS runs the whole life cycle on a reflink filesystem.
func TestVolumeOnXFS(t *testing.T) { testLifecycle(t, "xfs", MethodReflink) }

// TestVolumeOnExt4 runs it on a filesystem without reflink.
func TestVolumeOnExt4(t *testing.T) { testLifecycle(t, "ext4", MethodCopyFileRange) }

// progressLog records Progress calls.
type progressLog struct{ done, total []int64 }

func (p *progressLog) record(done, total int64) {
	p.done = append(p.done, done)
	p.total = append(p.total, total)
}

// check fails unless the calls advance monotonically to total.
func (p *progressLog) check(t *testing.T, total int64) {
	t.Helper()
	if len(p.done) == 0 {
		t.Fatal("Progress never called")
	}
	for i := range p.done {
		if p.total[i] != total || (i > 0 && p.done[i] < p.done[i-1]) {
			t.Fatalf("progress call %d: %d/%d after %v", i, p.done[i], p.total[i], p.done[:i])
		}
	}
	if last := p.done[len(p.done)-1]; last != total {
		t.Errorf("progress ended at %d, want %d", last, total)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bfree) * st.Bsize
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func testLifecycle(t *testing.T, fstype string, want Method) {
	requireTools(t, "mkfs.ext4", "e2fsck", "resize2fs", "filefrag")
	ctx := context.Background()
	fs := newLoopFS(t, fstype)
	golden := filepath.Join(fs, "golden.img")
	const size = 1 << 30

	info, err := Create(ctx, golden, CreateOptions{Size: size, Label: "golden", Owner: &Owner{UID: 100000, GID: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Clean || info.Size != size || info.Label != "golden" {
		t.Fatalf("created %+v", info)
	}

	// Give the golden image real data, as a used golden would have.
	data := make([]byte, 16<<20)
	rand.Read(data)
	var mnt string
	withMounted(t, golden, func(dir string) {
		mnt = dir
		writeFile(t, filepath.Join(dir, "data.bin"), data)
		st, err := os.Stat(dir)
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 100000 {
			t.Errorf("volume root owner: %v %v", st, err)
		}
	})
	info, err = Inspect(ctx, golden)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Clean || info.LastMounted != mnt || info.MountCount != 1 || info.LastMountTime.IsZero() || info.Used < int64(len(data)) {
		t.Errorf("after one mount: %+v (mounted on %s)", info, mnt)
	}
	if err := Check(ctx, golden); err != nil {
		t.Fatal(err)
	}
	goldenSum := sha(t, golden)

	// Clone twice.
	free := freeBytes(t, fs)
	var prog progressLog
	c1, c2 := filepath.Join(fs, "c1.img"), filepath.Join(fs, "c2.img")
	method, err := Clone(ctx, golden, c1, CloneOptions{Progress: prog.record})
	if err != nil {
		t.Fatal(err)
	}
	if method != want {
		t.Errorf("clone on %s used %q, want %q", fstype, method, want)
	}
	prog.check(t, size)
	if !sameBytes(t, c1, golden) || sha(t, c1) != goldenSum {
		t.Fatal("clone differs from its source")
	}
	if method, err = Clone(ctx, golden, c2, CloneOptions{}); err != nil || method != want {
		t.Fatalf("second clone: %q, %v", method, err)
	}
	used := free - freeBytes(t, fs)
	switch fstype {
	case "xfs":
		// Shared extents: the clones cost (almost) no space, and
		// FIEMAP flags their extents shared.
		if used > int64(len(data))/4 {
			t.Errorf("two reflink clones used %s of free space, want ≪ %s", FormatSize(used), FormatSize(int64(len(data))))
		}
		if out := sh(t, "filefrag", "-v", c1); !strings.Contains(out, "shared") {
			t.Errorf("clone has no shared extents:\n%s", out)
		}
	default:
		// Sparse copies: each clone allocates what the golden does.
		for _, c := range []string{c1, c2} {
			if a, g := allocated(t, c), allocated(t, golden); a > g+(1<<20) || a > size/16 {
				t.Errorf("%s allocates %s (golden %s, size %s): not sparse", c, FormatSize(a), FormatSize(g), FormatSize(size))
			}
		}
	}

	// Clones diverge independently; the golden stays as it was.
	withMounted(t, c1, func(dir string) {
		writeFile(t, filepath.Join(dir, "one.txt"), []byte("one"))
		f, err := os.OpenFile(filepath.Join(dir, "data.bin"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(bytes.Repeat([]byte{1}, 1<<20), 4<<20) // overwrite shared extents
		f.Close()
	})
	withMounted(t, c2, func(dir string) { writeFile(t, filepath.Join(dir, "two.txt"), []byte("two")) })
	if sha(t, golden) != goldenSum {
		t.Fatal("writing into clones changed the golden image")
	}
	s1, s2 := sha(t, c1), sha(t, c2)
	if s1 == goldenSum || s2 == goldenSum || s1 == s2 {
		t.Fatal("clones did not diverge")
	}
	for _, img := range []string{golden, c1, c2} {
		if err := Check(ctx, img); err != nil {
			t.Error(err)
		}
	}
	withMounted(t, c1, func(dir string) {
		assertFiles(t, dir, map[string]bool{"one.txt": true, "two.txt": false})
		got, _ := os.ReadFile(filepath.Join(dir, "data.bin"))
		if !bytes.Equal(got[:4<<20], data[:4<<20]) || got[4<<20] != 1 {
			t.Error("c1 data.bin is not golden data plus c1's write")
		}
	}, "ro")
	withMounted(t, c2, func(dir string) {
		assertFiles(t, dir, map[string]bool{"one.txt": false, "two.txt": true})
		if got, _ := os.ReadFile(filepath.Join(dir, "data.bin")); !bytes.Equal(got, data) {
			t.Error("c2 data.bin differs from the golden's")
		}
	}, "ro")

	testResize(t, c1)
	testInUseWhileMounted(t, c2)

	for _, img := range []string{c1, c2} {
		if err := Remove(ctx, img); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("%s still there after Remove: %v", img, err)
		}
	}
	if sha(t, golden) != goldenSum {
		t.Fatal("golden changed")
	}
}

func assertFiles(t *testing.T, dir string, want map[string]bool) {
	t.Helper()
	for name, exists := range want {
		_, err := os.Stat(filepath.Join(dir, name))
		if (err == nil) != exists {
			t.Errorf("%s in %s: exists=%v, want %v", name, dir, err == nil, exists)
		}
	}
}

// testResize grows and shrinks a populated image and refuses a shrink
// below its data without changing it.
func testResize(t *testing.T, img string) {
	ctx := context.Background()
	for _, size := range []int64{2 << 30, 512 << 20} {
		info, err := Resize(ctx, img, size)
		if err != nil {
			t.Fatalf("resize to %s: %v", FormatSize(size), err)
		}
		if info.Size != size || info.FileSize != size || !info.Clean {
			t.Errorf("after resize to %d: %+v", size, info)
		}
		if err := Check(ctx, img); err != nil {
			t.Error(err)
		}
		withMounted(t, img, func(dir string) {
			if b, err := os.ReadFile(filepath.Join(dir, "one.txt")); string(b) != "one" {
				t.Errorf("after resize: one.txt = %q, %v", b, err)
			}
		}, "ro")
	}
	before := sha(t, img)
	if _, err := Resize(ctx, img, 8<<20); err == nil || !strings.Contains(err.Error(), "resize2fs") {
		t.Errorf("shrinking below the data: %v", err)
	}
	if sha(t, img) != before {
		t.Error("a refused shrink changed the image")
	}
	if _, err := Resize(ctx, img, 512<<20+100); err == nil || !strings.Contains(err.Error(), "multiple") {
		t.Errorf("unaligned size: %v", err)
	}
	matches, _ := filepath.Glob(img + ".shrink-*")
	if len(matches) > 0 {
		t.Errorf("resize left %v", matches)
	}
}

// testInUseWhileMounted: a mounted image is dirty (journal in use) and
// attached to a loop device, so Acquire, Clone, Remove and Resize refuse.
func testInUseWhileMounted(t *testing.T, img string) {
	ctx := context.Background()
	dir := t.TempDir()
	unmount := mountLoop(t, img, dir)
	writeFile(t, filepath.Join(dir, "live.txt"), []byte("x"))
	_, err := Acquire(ctx, img, AcquireOptions{})
	assertIs(t, err, ErrNotClean, "journal")
	_, err = Clone(ctx, img, img+".copy", CloneOptions{})
	assertIs(t, err, ErrNotClean)
	assertIs(t, Remove(ctx, img), ErrInUse, "attached to /dev/loop")
	_, err = Resize(ctx, img, 2<<30)
	assertIs(t, err, ErrInUse, "attached")
	unmount()
	if _, err := os.Stat(img + ".copy"); !os.IsNotExist(err) {
		t.Errorf("refused clone left a file: %v", err)
	}
	l, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire after unmount: %v", err)
	}
	l.Release()
}
