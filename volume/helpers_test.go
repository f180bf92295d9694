package volume

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/testfs"
)

// privateNSEnv marks the test binary re-executed in its own mount
// namespace.
const privateNSEnv = "GVX_VOLUME_TEST_PRIVATE_MOUNTNS"

// TestMain runs the tests, as root in a private mount namespace (see
// testfs.RunPrivate).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gvx-marks-")
	if err != nil {
		panic(err)
	}
	MarkDir = dir
	code := testfs.RunPrivate(m, privateNSEnv)
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	requireRoot  = testfs.RequireRoot
	requireTools = testfs.RequireTools
	sh           = testfs.Sh
)

// newLoopFS makes and mounts a 2 GiB filesystem of type fstype ("xfs":
// reflink; "ext4": none); see testfs.LoopFS.
func newLoopFS(t *testing.T, fstype string) string {
	t.Helper()
	return testfs.LoopFS(t, fstype, "2G")
}

// mountLoop loop-mounts img on dir (read-write unless opts add ro) and
// returns a function that unmounts it; cleanup calls that too. After
// unmounting it checks that no loop device is left on img.
func mountLoop(t *testing.T, img, dir string, opts ...string) func() {
	t.Helper()
	o := strings.Join(append([]string{"loop"}, opts...), ",")
	sh(t, "mount", "-o", o, img, dir)
	done := false
	unmount := func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("umount", "-d", dir).CombinedOutput(); err != nil {
			t.Errorf("umount -d %s: %v\n%s", dir, err, out)
		}
		if out := sh(t, "losetup", "-j", img); strings.TrimSpace(out) != "" {
			t.Errorf("loop device left on %s: %s", img, out)
		}
	}
	t.Cleanup(unmount)
	return unmount
}

// withMounted mounts img on a temporary directory, runs fn on it and
// unmounts.
func withMounted(t *testing.T, img string, fn func(dir string), opts ...string) {
	t.Helper()
	dir := t.TempDir()
	unmount := mountLoop(t, img, dir, opts...)
	fn(dir)
	unmount()
}

// sha digests a file's content fast, holes included: SHA-256 over its
// size and each non-zero 4 KiB block with its offset, so files with equal
// bytes get equal digests however they are allocated. (Plain SHA-256
// reads the holes too, which takes seconds per GiB here.)
func sha(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, size)
	const blk = 4096
	buf := make([]byte, 1<<20)
	var next int64 // first block not digested yet
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		for pos := max(data/blk*blk, next); pos < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), (hole-pos+blk-1)/blk*blk)], pos)
			if n == 0 {
				t.Fatalf("read %s at %d: %v", path, pos, err)
			}
			for b := 0; b < n; b += blk {
				block := buf[b:min(b+blk, n)]
				if !allZero(block) {
					binary.Write(h, binary.LittleEndian, pos+int64(b))
					h.Write(block)
				}
			}
			pos += int64(n)
			next = pos
		}
		off = hole
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameBytes compares two files byte by byte, independently of sha.
func sameBytes(t testing.TB, a, b string) bool {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if erra != nil || errb != nil {
			return erra == errb || (erra == io.ErrUnexpectedEOF && errb == io.ErrUnexpectedEOF)
		}
	}
}

func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// mkImage creates a clean image of size bytes in a new temporary
// directory (on the host's filesystem; no mount needed).
func mkImage(t *testing.T, size int64) string {
	t.Helper()
	requireTools(t, "mkfs.ext4", "e2fsck", "debugfs")
	p := filepath.Join(t.TempDir(), "vol.img")
	if _, err := Create(context.Background(), p, CreateOptions{Size: size, Label: "test"}); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyFile copies src to a new file dst (plain, not sparse).
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// setState writes s_state with debugfs, which recomputes the checksum.
func setState(t testing.TB, img string, state int) {
	t.Helper()
	sh(t, "debugfs", "-w", "-R", fmt.Sprintf("ssv state %d", state), img)
}

// assertIs fails unless err wraps want and its message mentions every
// string in mention.
func assertIs(t testing.TB, err, want error, mention ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}
