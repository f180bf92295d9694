package volume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// The checks below run before the host kernel's ext4 driver sees an image
// a user handed to gvx: the driver is host kernel code, and a crafted
// image is its input. They refuse what a filesystem made by mkfs.ext4
// (and grown by resize2fs) never has, and leave the rest of the metadata
// to e2fsck -fn (Verify).

// Feature bits an image may carry; anything else is refused. These are
// what mkfs.ext4 and resize2fs make, plus the common optional ones; the
// refused ones are rare code paths of the driver (external journals, MMP,
// bigalloc, snapshots, verity, encryption, unknown bits).
const (
	allowedCompat = 0x4 | 0x8 | 0x10 | 0x20 | 0x200 | 0x800 | 0x1000 // has_journal ext_attr resize_inode dir_index sparse_super2 stable_inodes orphan_file
	// filetype needs_recovery meta_bg extent 64bit flex_bg metadata_csum_seed large_dir
	allowedIncompat = 0x2 | 0x4 | 0x10 | 0x40 | 0x80 | 0x200 | 0x2000 | 0x4000
	// sparse_super large_file huge_file uninit_bg dir_nlink extra_isize quota metadata_csum project orphan_present
	allowedROCompat = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40 | 0x100 | 0x400 | 0x2000 | 0x10000

	compatHasJournal = 0x4
	incompatMetaBG   = 0x10
	incompatExtents  = 0x40

	offRBlocksLo   = 0x08
	offFirstIno    = 0x54
	offInodeSize   = 0x58
	offJournalInum = 0xE0
	offJournalDev  = 0xE4
	offDescSize    = 0xFE
	offJnlBlocks   = 0x10C

	journalInode = 8
	extentMagic  = 0xF30A
	extentsFlag  = 0x80000
	// maxGroupTable bounds the group descriptor table (1 TiB of 4 KiB
	// blocks has 8192 groups × 64 bytes = 512 KiB); it is read in chunks.
	maxGroupTable = 16 << 20
	tableChunk    = 64 << 10
)

// geometry is what the structural checks derive from a superblock.
type geometry struct {
	sb        *superblock
	groups    uint64
	descSize  int64
	inodeSize int64
	raw       []byte
}

// checkStructure checks the superblock's counts and features, every
// group descriptor, and the journal's location against the image in r
// (fileSize bytes long). It returns the evidence of the first problem, or
// "" when the image has the shape of a filesystem mkfs.ext4 made.
func checkStructure(r io.ReaderAt, fileSize int64, raw []byte, sb *superblock) string {
	le := binary.LittleEndian
	if bad := sb.compat &^ allowedCompat; bad != 0 {
		return "unsupported compat features " + featureList("compat", bad, compatNames)
	}
	if bad := sb.incompat &^ allowedIncompat; bad != 0 {
		return "unsupported incompat features " + featureList("incompat", bad, incompatNames)
	}
	if bad := sb.roCompat &^ allowedROCompat; bad != 0 {
		return "unsupported ro_compat features " + featureList("ro_compat", bad, roCompatNames)
	}
	if fileSize < sb.size() {
		return fmt.Sprintf("file is %d bytes, the filesystem %d", fileSize, sb.size())
	}
	g := geometry{sb: sb, raw: raw}
	bs := uint64(sb.blockSize)
	switch {
	case uint64(sb.blocksPerGroup) > 8*bs:
		return fmt.Sprintf("%d blocks per group, a %d-byte bitmap block holds %d", sb.blocksPerGroup, bs, 8*bs)
	case uint64(sb.inodesPerGroup) > 8*bs:
		return fmt.Sprintf("%d inodes per group, a %d-byte bitmap block holds %d", sb.inodesPerGroup, bs, 8*bs)
	case sb.freeInodes > sb.inodesCount:
		return fmt.Sprintf("%d free of %d inodes", sb.freeInodes, sb.inodesCount)
	case uint64(le.Uint32(raw[offRBlocksLo:])) > sb.blocksCount:
		return fmt.Sprintf("%d reserved of %d blocks", le.Uint32(raw[offRBlocksLo:]), sb.blocksCount)
	}
	g.groups = (sb.blocksCount - uint64(sb.firstDataBlock) + uint64(sb.blocksPerGroup) - 1) / uint64(sb.blocksPerGroup)
	if g.groups == 0 || g.groups*uint64(sb.inodesPerGroup) != uint64(sb.inodesCount) {
		return fmt.Sprintf("%d groups × %d inodes per group ≠ %d inodes", g.groups, sb.inodesPerGroup, sb.inodesCount)
	}
	g.inodeSize = 128
	if rev := le.Uint32(raw[offRevLevel:]); rev >= 1 {
		g.inodeSize = int64(le.Uint16(raw[offInodeSize:]))
		if g.inodeSize < 128 || g.inodeSize > sb.blockSize || bits.OnesCount64(uint64(g.inodeSize)) != 1 {
			return fmt.Sprintf("inode size %d, want a power of 2 from 128 to the block size", g.inodeSize)
		}
		if fi := le.Uint32(raw[offFirstIno:]); fi < 11 || fi >= sb.inodesCount {
			return fmt.Sprintf("first inode %d of %d", fi, sb.inodesCount)
		}
	}
	g.descSize = 32
	if sb.incompat&incompat64bit != 0 {
		g.descSize = int64(le.Uint16(raw[offDescSize:]))
		if g.descSize < 64 || g.descSize > 1024 || bits.OnesCount64(uint64(g.descSize)) != 1 {
			return fmt.Sprintf("group descriptor size %d, want a power of 2 from 64 to 1024", g.descSize)
		}
	}
	if sb.incompat&incompatMetaBG == 0 {
		if why := g.checkGroups(r); why != "" {
			return why
		}
	}
	if sb.compat&compatHasJournal != 0 {
		if why := g.checkJournal(r); why != "" {
			return why
		}
	}
	return ""
}

// featureList names the bits of v.
func featureList(kind string, v uint32, names map[uint32]string) string {
	sb := &superblock{}
	switch kind {
	case "compat":
		sb.compat = v
	case "incompat":
		sb.incompat = v
	default:
		sb.roCompat = v
	}
	return fmt.Sprint(sb.features())
}

// checkGroups reads the group descriptor table (right after the
// superblock's block) and checks that each group's bitmaps and inode
// table lie inside the filesystem and its free counts inside the group.
func (g *geometry) checkGroups(r io.ReaderAt) string {
	sb := g.sb
	size := g.groups * uint64(g.descSize)
	if size > maxGroupTable {
		return fmt.Sprintf("%d groups: a %d-byte descriptor table", g.groups, size)
	}
	tableBlock := uint64(sb.firstDataBlock) + 1
	table := make([]byte, min(size, tableChunk)) // a multiple of descSize
	perChunk := uint64(len(table)) / uint64(g.descSize)
	itableBlocks := (uint64(sb.inodesPerGroup)*uint64(g.inodeSize) + uint64(sb.blockSize) - 1) / uint64(sb.blockSize)
	var free uint64
	for i := uint64(0); i < g.groups; i++ {
		if i%perChunk == 0 {
			chunk := table[:min(uint64(len(table)), size-i*uint64(g.descSize))]
			if _, err := r.ReadAt(chunk, int64(tableBlock)*sb.blockSize+int64(i)*g.descSize); err != nil {
				return fmt.Sprintf("group descriptor table at block %d: %v", tableBlock, err)
			}
		}
		j := i % perChunk
		d := desc{b: table[j*uint64(g.descSize) : (j+1)*uint64(g.descSize)], wide: g.descSize >= 64}
		for _, f := range []struct {
			name string
			at   uint64
			n    uint64
		}{
			{"block bitmap", d.u64(0x0, 0x20), 1},
			{"inode bitmap", d.u64(0x4, 0x24), 1},
			{"inode table", d.u64(0x8, 0x28), itableBlocks},
		} {
			if f.at <= uint64(sb.firstDataBlock) || f.at >= sb.blocksCount || f.n > sb.blocksCount-f.at {
				return fmt.Sprintf("group %d: %s at block %d (+%d) outside the filesystem's %d blocks", i, f.name, f.at, f.n, sb.blocksCount)
			}
		}
		fb, fi := d.u32(0xC, 0x2C), d.u32(0xE, 0x2E)
		if fb > uint64(sb.blocksPerGroup) || fi > uint64(sb.inodesPerGroup) {
			return fmt.Sprintf("group %d: %d free blocks of %d, %d free inodes of %d", i, fb, sb.blocksPerGroup, fi, sb.inodesPerGroup)
		}
		free += fb
	}
	if free > sb.blocksCount {
		return fmt.Sprintf("groups count %d free blocks of %d", free, sb.blocksCount)
	}
	return ""
}

// desc is one group descriptor; 64-bit ones carry high halves.
type desc struct {
	b    []byte
	wide bool
}

func (d desc) u64(lo, hi int) uint64 {
	v := uint64(binary.LittleEndian.Uint32(d.b[lo:]))
	if d.wide {
		v |= uint64(binary.LittleEndian.Uint32(d.b[hi:])) << 32
	}
	return v
}

func (d desc) u32(lo, hi int) uint64 {
	v := uint64(binary.LittleEndian.Uint16(d.b[lo:]))
	if d.wide {
		v |= uint64(binary.LittleEndian.Uint16(d.b[hi:])) << 16
	}
	return v
}

// checkJournal checks that the journal is the internal inode 8 and that
// its blocks (and the superblock's backup of its block map) lie inside
// the filesystem.
func (g *geometry) checkJournal(r io.ReaderAt) string {
	sb, le := g.sb, binary.LittleEndian
	if ino := le.Uint32(g.raw[offJournalInum:]); ino != journalInode {
		return fmt.Sprintf("journal inode %d, want the internal journal (inode %d)", ino, journalInode)
	}
	if dev := le.Uint32(g.raw[offJournalDev:]); dev != 0 {
		return fmt.Sprintf("journal on device 0x%x: external journals are not supported", dev)
	}
	// The backup copies the journal inode's i_block: an extent root, or
	// (ext3) block numbers.
	backup := g.raw[offJnlBlocks : offJnlBlocks+60]
	if why := g.checkBlockMap("journal backup in the superblock", backup, le.Uint16(backup) == extentMagic); why != "" {
		return why
	}
	// Inode 8 is in group 0.
	var d [64]byte
	tableBlock := uint64(sb.firstDataBlock) + 1
	if _, err := r.ReadAt(d[:g.descSize], int64(tableBlock)*sb.blockSize); err != nil {
		return fmt.Sprintf("group 0 descriptor: %v", err)
	}
	itable := desc{b: d[:], wide: g.descSize >= 64}.u64(0x8, 0x28)
	if itable == 0 || itable >= sb.blocksCount {
		return fmt.Sprintf("group 0: inode table at block %d outside the filesystem", itable)
	}
	inode := make([]byte, 128)
	if _, err := r.ReadAt(inode, int64(itable)*sb.blockSize+(journalInode-1)*g.inodeSize); err != nil {
		return fmt.Sprintf("journal inode: %v", err)
	}
	extents := le.Uint32(inode[0x20:])&extentsFlag != 0
	return g.checkBlockMap("journal inode", inode[0x28:0x28+60], extents)
}

// checkBlockMap checks an inode's i_block (60 bytes): the root of an
// extent tree, or 15 direct and indirect block numbers. Each block it
// names must lie inside the filesystem; extent trees are checked at
// their root.
func (g *geometry) checkBlockMap(what string, b []byte, extents bool) string {
	le, n := binary.LittleEndian, g.sb.blocksCount
	if !extents {
		for i := 0; i < 15; i++ {
			if blk := uint64(le.Uint32(b[4*i:])); blk >= n {
				return fmt.Sprintf("%s: block %d outside the filesystem's %d blocks", what, blk, n)
			}
		}
		return ""
	}
	if m := le.Uint16(b); m != extentMagic {
		return fmt.Sprintf("%s: extent header magic 0x%04x, want 0x%04x", what, m, extentMagic)
	}
	entries, max, depth := le.Uint16(b[2:]), le.Uint16(b[4:]), le.Uint16(b[6:])
	if max > 4 || entries > max || depth > 5 {
		return fmt.Sprintf("%s: extent root of %d/%d entries, depth %d", what, entries, max, depth)
	}
	for i := 0; i < int(entries); i++ {
		e := b[12+12*i : 24+12*i]
		if depth == 0 {
			l := uint64(le.Uint16(e[4:]))
			if l > 32768 {
				l -= 32768 // an uninitialized extent
			}
			start := uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:]))
			if start >= n || l > n-start {
				return fmt.Sprintf("%s: extent of %d blocks at block %d outside the filesystem's %d blocks", what, l, start, n)
			}
		} else if leaf := uint64(le.Uint16(e[8:]))<<32 | uint64(le.Uint32(e[4:])); leaf >= n {
			return fmt.Sprintf("%s: extent index at block %d outside the filesystem's %d blocks", what, leaf, n)
		}
	}
	return ""
}

// ErrUnsafe means the image has the ext4 magic but a shape no filesystem
// made by mkfs.ext4 has, or fails e2fsck: gvx does not let the host kernel
// mount it.
var ErrUnsafe = errors.New("is refused: not safe to mount")

// Verify runs the full check an image gets before the host kernel mounts
// it for a sandbox: the superblock (Inspect), the feature allow-list, the
// group descriptors, the journal's location, and e2fsck -fn. An image that
// passes is marked (see MarkDir) so that, unchanged, it is not checked
// again; Create and Clone mark what they make from marked sources.
func Verify(ctx context.Context, path string) error {
	f, err := lockPath(path, os.O_RDONLY, unix.LOCK_SH)
	if err != nil {
		return wrap("verify", path, err)
	}
	defer flock.Close(f)
	if err := checkNotAttached(f, path); err != nil {
		return withOp("verify", err)
	}
	info, sb, err := inspectFile(f, path)
	if err != nil {
		return withOp("verify", err)
	}
	return withOp("verify", verifyFile(ctx, f, path, info, sb, false))
}

// verifyFile checks the open image f unless it carries a valid mark
// (or always, with full); e2fsck runs only on clean images (a dirty one
// is repaired first by whoever forced it, or refused).
func verifyFile(ctx context.Context, f *os.File, path string, info Info, sb *superblock, full bool) error {
	return verifyWith(ctx, f, path, info, sb, full, true)
}

// verifyWith is verifyFile; fsck false skips e2fsck, which the caller ran.
func verifyWith(ctx context.Context, f *os.File, path string, info Info, sb *superblock, full, fsck bool) error {
	if !full && marked(f, path) {
		return nil
	}
	before, err := stateOf(f)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if why := checkStructure(f, info.FileSize, sb.raw, sb); why != "" {
		unmark(f)
		return &Error{Path: path, Err: ErrUnsafe, Detail: why,
			Fix: "nothing was mounted; use an image made by `gvx volume create` (or mkfs.ext4 with default features), or repair a copy with `e2fsck -fy`"}
	}
	if !info.Clean {
		return nil
	}
	if !fsck {
		mark(ctx, f, path, before)
		return nil
	}
	res, err := run(ctx, "e2fsck", "-fn", path)
	if err != nil {
		return fmt.Errorf("verify %s: %w", path, err)
	}
	if res.exitCode != 0 {
		unmark(f)
		return &Error{Path: path, Err: ErrUnsafe,
			Detail: fmt.Sprintf("e2fsck -fn exit %d: %s", res.exitCode, summary(res.output, 4)),
			Fix:    "nothing was mounted; repair a copy with `e2fsck -fy`, or restore the image from its source"}
	}
	mark(ctx, f, path, before)
	return nil
}
