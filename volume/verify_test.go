package volume

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// editSuperblock applies fn to img's superblock bytes and rewrites the
// superblock checksum, so that only the edited field is wrong.
func editSuperblock(t testing.TB, img string, fn func(sb []byte)) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb := make([]byte, superblockSize)
	if _, err := f.ReadAt(sb, superblockOffset); err != nil {
		t.Fatal(err)
	}
	fn(sb)
	binary.LittleEndian.PutUint32(sb[offChecksum:], ^crc32.Checksum(sb[:offChecksum], castagnoli))
	if _, err := f.WriteAt(sb, superblockOffset); err != nil {
		t.Fatal(err)
	}
}

func put32(off int, v uint32) func([]byte) {
	return func(sb []byte) { binary.LittleEndian.PutUint32(sb[off:], v) }
}

func or32(off int, v uint32) func([]byte) {
	return func(sb []byte) { binary.LittleEndian.PutUint32(sb[off:], binary.LittleEndian.Uint32(sb[off:])|v) }
}

// craftedImage is one way to make a hostile image from a valid one.
type craftedImage struct {
	name    string
	craft   func(t *testing.T, img string)
	want    error
	mention string
}

// craftedImages are the hostile images the tests make from a valid
// 64 MiB image: each must be refused before anything mounts it.
var craftedImages = []craftedImage{
	{"bad magic", func(t *testing.T, img string) {
		editSuperblock(t, img, func(sb []byte) { sb[offMagic] = 0x52 })
	}, ErrNotExt4, "magic"},
	{"block size 128 KiB", func(t *testing.T, img string) { editSuperblock(t, img, put32(offLogBlockSize, 7)) }, ErrBadSuperblock, "log block size"},
	{"blocks count beyond the file", func(t *testing.T, img string) {
		editSuperblock(t, img, put32(offBlocksCountLo, 1<<31))
	}, ErrTruncated, "file is"},
	{"huge inodes count", func(t *testing.T, img string) {
		editSuperblock(t, img, put32(offInodesCount, 0xFFFFFFFF))
	}, ErrUnsafe, "inodes per group"},
	{"free inodes over inodes", func(t *testing.T, img string) {
		editSuperblock(t, img, put32(offFreeInodes, 0xFFFFFFF0))
	}, ErrUnsafe, "free of"},
	{"negative reserved blocks", func(t *testing.T, img string) { editSuperblock(t, img, put32(offRBlocksLo, 0xFFFFFFFF)) }, ErrUnsafe, "reserved"},
	{"blocks per group over a bitmap", func(t *testing.T, img string) {
		editSuperblock(t, img, put32(offBlocksPerGroup, 1<<20))
	}, ErrUnsafe, "blocks per group"},
	{"inode size 100", func(t *testing.T, img string) {
		editSuperblock(t, img, func(sb []byte) { binary.LittleEndian.PutUint16(sb[offInodeSize:], 100) })
	}, ErrUnsafe, "inode size"},
	{"unsupported feature mmp", func(t *testing.T, img string) { editSuperblock(t, img, or32(offFeatureIncompat, 0x100)) }, ErrUnsafe, "mmp"},
	{"unsupported feature bigalloc", func(t *testing.T, img string) { editSuperblock(t, img, or32(offFeatureROCompat, 0x200)) }, ErrUnsafe, "bigalloc"},
	{"unknown feature bit", func(t *testing.T, img string) { editSuperblock(t, img, or32(offFeatureIncompat, 0x800000)) }, ErrUnsafe, "incompat_0x800000"},
	{"external journal", func(t *testing.T, img string) { editSuperblock(t, img, put32(offJournalDev, 0x801)) }, ErrUnsafe, "external"},
	{"journal inode 12", func(t *testing.T, img string) { editSuperblock(t, img, put32(offJournalInum, 12)) }, ErrUnsafe, "journal inode 12"},
	{"journal backup outside", func(t *testing.T, img string) {
		editSuperblock(t, img, put32(offJnlBlocks+5*4, 0x7FFFFFFF))
	}, ErrUnsafe, "journal backup"},
	// debugfs rewrites the inode's checksum: only its extent is wrong.
	{"journal extent outside", func(t *testing.T, img string) {
		sh(t, "debugfs", "-w", "-R", "sif <8> block[5] 0x7fffffff", img)
	}, ErrUnsafe, "journal inode: extent"},
	{"group inode table outside", func(t *testing.T, img string) {
		sh(t, "debugfs", "-w", "-R", "set_bg 0 inode_table 0x7fffffff", img)
	}, ErrUnsafe, "group 0: inode table"},
	{"group block bitmap at 0", func(t *testing.T, img string) {
		sh(t, "debugfs", "-w", "-R", "set_bg 0 block_bitmap 0", img)
	}, ErrUnsafe, "group 0: block bitmap"},
	{"group free blocks over the group", func(t *testing.T, img string) {
		sh(t, "debugfs", "-w", "-R", "set_bg 0 free_blocks_count 60000", img)
	}, ErrUnsafe, "group 0: 60000 free blocks"},
	// Passes the structural checks; e2fsck finds it.
	{"root directory unlinked", func(t *testing.T, img string) {
		sh(t, "debugfs", "-w", "-R", "sif <2> links_count 0", img)
	}, ErrUnsafe, "e2fsck -fn exit"},
	{"truncated", func(t *testing.T, img string) {
		if err := os.Truncate(img, 32<<20); err != nil {
			t.Fatal(err)
		}
	}, ErrTruncated, "is truncated"},
}

// TestCraftedImagesRefused makes each crafted image from a valid one and
// checks that Acquire (what the shim calls before gvx-sentry mounts a
// volume) and Verify refuse it with an error naming the problem.
func TestCraftedImagesRefused(t *testing.T) {
	requireRoot(t)
	valid := mkImage(t, 64<<20)
	ctx := context.Background()
	if l, err := Acquire(ctx, valid, AcquireOptions{}); err != nil {
		t.Fatalf("valid image refused: %v", err)
	} else {
		l.Release()
	}
	refused := 0
	for _, c := range craftedImages {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "crafted.img")
			copyFile(t, valid, img)
			c.craft(t, img)
			l, err := Acquire(ctx, img, AcquireOptions{})
			if err == nil {
				l.Release()
				t.Fatalf("Acquire accepted the crafted image (%s)", c.name)
			}
			assertIs(t, err, c.want, c.mention)
			assertIs(t, Verify(ctx, img), c.want, c.mention)
			if !strings.Contains(err.Error(), img) {
				t.Errorf("error %q does not name the image", err)
			}
			t.Logf("%s: %v", c.name, err)
			refused++
		})
	}
	t.Logf("crafted images: %d tried, %d refused, 0 mounted", len(craftedImages), refused)
}

// TestVerifiedMark: an image gvx made carries a mark and Acquire skips the
// full check; any change to the file (a write, even by root) voids it.
func TestVerifiedMark(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	img := mkImage(t, 1<<30)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	if !marked(f, img) {
		t.Fatal("a new image is not marked")
	}
	f.Close()
	acquire := func() time.Duration {
		t0 := time.Now()
		l, err := Acquire(ctx, img, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		l.Release()
		return d
	}
	const n = 5
	var withMark, without time.Duration
	for i := 0; i < n; i++ {
		withMark += acquire()
		os.RemoveAll(MarkDir) // the next Acquire runs the full check (and marks again)
		without += acquire()
	}
	t.Logf("Acquire of a 1 GiB image: %v with the verified mark, %v with the full check (mean of %d)", withMark/n, without/n, n)

	// A clone of a marked image is marked; a write voids the clone's mark.
	dst := filepath.Join(t.TempDir(), "clone.img")
	if _, err := Clone(ctx, img, dst, CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	df, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	if !marked(df, dst) {
		t.Fatal("a clone of a marked image is not marked")
	}
	time.Sleep(10 * time.Millisecond) // past the kernel's coarse timestamp tick
	if _, err := df.WriteAt([]byte{0}, 900<<20); err != nil {
		t.Fatal(err)
	}
	if marked(df, dst) {
		t.Fatal("the mark survived a write")
	}
	// A crafted change after marking is caught again.
	sh(t, "debugfs", "-w", "-R", "set_bg 3 inode_table 0x7fffffff", dst)
	if _, err := Acquire(ctx, dst, AcquireOptions{}); err == nil {
		t.Fatal("Acquire accepted an image crafted after it was marked")
	} else {
		assertIs(t, err, ErrUnsafe, "group 3: inode table")
	}
	// Group- or world-writable images are never marked.
	if err := os.Chmod(img, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, img); err != nil {
		t.Fatal(err)
	}
	f, _ = os.Open(img)
	defer f.Close()
	if marked(f, img) {
		t.Fatal("a world-writable image was marked")
	}
}

// TestStructureOfMkfsImages: images mkfs.ext4 makes at several sizes and
// block sizes pass the structural checks (no false refusals).
func TestStructureOfMkfsImages(t *testing.T) {
	requireTools(t, "mkfs.ext4")
	for _, c := range []struct {
		size string
		args []string
	}{
		{"8M", nil}, {"64M", []string{"-b", "1024"}}, {"3G", nil}, {"300M", []string{"-O", "^metadata_csum,^64bit"}},
		{"100M", []string{"-t", "ext3"}}, {"100M", []string{"-O", "^has_journal"}}, {"2G", []string{"-b", "2048", "-I", "128"}},
	} {
		img := filepath.Join(t.TempDir(), "i.img")
		sh(t, "truncate", "-s", c.size, img)
		sh(t, "mkfs.ext4", append(append([]string{"-q", "-F"}, c.args...), img)...)
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		info, sb, err := inspectFile(f, img)
		if err != nil {
			t.Fatal(err)
		}
		if why := checkStructure(f, info.FileSize, sb.raw, sb); why != "" {
			t.Errorf("mkfs.ext4 %v of %s refused: %s", c.args, c.size, why)
		}
		f.Close()
	}
}

// FuzzParseSuperblock: any 1024 bytes either are refused or describe a
// filesystem whose geometry is sane; features and names never panic.
func FuzzParseSuperblock(f *testing.F) {
	// testdata/fuzz/FuzzParseSuperblock holds superblocks mkfs.ext4 made.
	f.Add(make([]byte, superblockSize))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sb, detail, err := parseSuperblock(raw)
		if err != nil {
			if detail == "" {
				t.Fatalf("error %v without detail", err)
			}
			return
		}
		if sb.blockSize < 1024 || sb.blockSize > 64<<10 || sb.size() <= 0 || sb.freeBlocks > sb.blocksCount {
			t.Fatalf("accepted geometry: %d blocks of %d, %d free", sb.blocksCount, sb.blockSize, sb.freeBlocks)
		}
		_ = sb.features()
		_ = sb.uuidString()
		_ = sb.dirty()
	})
}

// FuzzCheckStructure: the structural checks never panic and never read
// outside the image. The input is the metadata they read: the superblock
// (1024 bytes), the first 1024 bytes of the group descriptor table and
// the journal inode (256 bytes), placed where the superblock and group 0
// say; the rest of the image the superblock describes reads as zeros.
// testdata/fuzz/FuzzCheckStructure holds that metadata of images
// mkfs.ext4 made.
func FuzzCheckStructure(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2048+256 {
			return
		}
		sb, _, err := parseSuperblock(in[:superblockSize])
		if err != nil || sb.size() > 256<<20 { // keep each run fast; the table is bounded anyway
			return
		}
		img := &sparseImage{size: sb.size()}
		img.put(superblockOffset, in[:1024])
		table := int64(sb.firstDataBlock+1) * sb.blockSize
		img.put(table, in[1024:2048])
		descSize, inodeSize := int64(32), int64(128)
		if sb.incompat&incompat64bit != 0 {
			descSize = int64(binary.LittleEndian.Uint16(sb.raw[offDescSize:]))
		}
		if binary.LittleEndian.Uint32(sb.raw[offRevLevel:]) >= 1 {
			inodeSize = int64(binary.LittleEndian.Uint16(sb.raw[offInodeSize:]))
		}
		itable := desc{b: in[1024:], wide: descSize >= 64}.u64(0x8, 0x28)
		img.put(int64(itable)*sb.blockSize+(journalInode-1)*inodeSize, in[2048:2304])
		_ = checkStructure(img, img.size, sb.raw, sb)
	})
}

// sparseImage is an image of size bytes holding segments, zeros elsewhere.
type sparseImage struct {
	size int64
	segs []struct {
		off int64
		b   []byte
	}
}

func (r *sparseImage) put(off int64, b []byte) {
	r.segs = append(r.segs, struct {
		off int64
		b   []byte
	}{off, b})
}

func (r *sparseImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > r.size || int64(len(p)) > r.size-off {
		return 0, fmt.Errorf("read of %d bytes at %d of a %d-byte image", len(p), off, r.size)
	}
	clear(p)
	for _, s := range r.segs {
		lo, hi := max(off, s.off), min(off+int64(len(p)), s.off+int64(len(s.b)))
		if s.off >= 0 && lo < hi {
			copy(p[lo-off:hi-off], s.b[lo-s.off:hi-s.off])
		}
	}
	return len(p), nil
}

// TestMarkDirModes: the first mark on a host makes the state directory
// above the marks traversable by the sandboxes' host uid (0711), the
// marks' own directory root's alone (0700).
func TestMarkDirModes(t *testing.T) {
	requireRoot(t)
	saved := MarkDir
	t.Cleanup(func() { MarkDir = saved })
	state := filepath.Join(t.TempDir(), "state")
	MarkDir = filepath.Join(state, "verified")
	img := mkImage(t, 16<<20)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !marked(f, img) {
		t.Fatal("a new image is not marked")
	}
	for dir, want := range map[string]os.FileMode{state: 0o711, MarkDir: 0o700} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", dir, got, want)
		}
	}
}
