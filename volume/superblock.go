package volume

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"strings"
	"time"
)

// The ext4 superblock is 1024 bytes at byte 1024 of the image, whatever
// the block size. Offsets below are relative to its start; all fields are
// little endian. Only what Inspect reports or validates is decoded.
const (
	superblockOffset = 1024
	superblockSize   = 1024
	ext4Magic        = 0xEF53

	offInodesCount      = 0x00
	offBlocksCountLo    = 0x04
	offFreeBlocksLo     = 0x0C
	offFreeInodes       = 0x10
	offFirstDataBlock   = 0x14
	offLogBlockSize     = 0x18
	offBlocksPerGroup   = 0x20
	offInodesPerGroup   = 0x28
	offMtime            = 0x2C
	offWtime            = 0x30
	offMntCount         = 0x34
	offMagic            = 0x38
	offState            = 0x3A
	offRevLevel         = 0x4C
	offFeatureCompat    = 0x5C
	offFeatureIncompat  = 0x60
	offFeatureROCompat  = 0x64
	offUUID             = 0x68
	offVolumeName       = 0x78
	offLastMounted      = 0x88
	offLastOrphan       = 0xE8
	offMkfsTime         = 0x108
	offBlocksCountHi    = 0x150
	offFreeBlocksHi     = 0x158
	offChecksumType     = 0x175
	offWtimeHi          = 0x274
	offMtimeHi          = 0x275
	offMkfsTimeHi       = 0x276
	offChecksum         = 0x3FC
	stateValid          = 0x0001 // EXT4_VALID_FS: unmounted cleanly
	stateError          = 0x0002 // EXT4_ERROR_FS: errors detected
	incompatRecover     = 0x0004 // needs_recovery: journal not replayed
	incompat64bit       = 0x0080
	roCompatMetaCsum    = 0x0400
	roCompatOrphanExist = 0x10000
)

// Feature names as e2fsprogs prints them, by bit.
var (
	compatNames = map[uint32]string{
		0x1: "dir_prealloc", 0x2: "imagic_inodes", 0x4: "has_journal",
		0x8: "ext_attr", 0x10: "resize_inode", 0x20: "dir_index",
		0x40: "lazy_bg", 0x100: "snapshot_bitmap", 0x200: "sparse_super2",
		0x400: "fast_commit", 0x800: "stable_inodes", 0x1000: "orphan_file",
	}
	incompatNames = map[uint32]string{
		0x1: "compression", 0x2: "filetype", 0x4: "needs_recovery",
		0x8: "journal_dev", 0x10: "meta_bg", 0x40: "extent", 0x80: "64bit",
		0x100: "mmp", 0x200: "flex_bg", 0x400: "ea_inode", 0x1000: "dirdata",
		0x2000: "metadata_csum_seed", 0x4000: "large_dir",
		0x8000: "inline_data", 0x10000: "encrypt", 0x20000: "casefold",
	}
	roCompatNames = map[uint32]string{
		0x1: "sparse_super", 0x2: "large_file", 0x8: "huge_file",
		0x10: "uninit_bg", 0x20: "dir_nlink", 0x40: "extra_isize",
		0x80: "snapshot", 0x100: "quota", 0x200: "bigalloc",
		0x400: "metadata_csum", 0x800: "replica", 0x1000: "read-only",
		0x2000: "project", 0x4000: "shared_blocks", 0x8000: "verity",
		0x10000: "orphan_present",
	}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// superblock is the decoded part of an ext4 superblock.
type superblock struct {
	inodesCount     uint32
	freeInodes      uint32
	blocksCount     uint64
	freeBlocks      uint64
	blockSize       int64
	firstDataBlock  uint32
	blocksPerGroup  uint32
	inodesPerGroup  uint32
	mountTime       time.Time
	writeTime       time.Time
	mkfsTime        time.Time
	mountCount      uint16
	state           uint16
	compat          uint32
	incompat        uint32
	roCompat        uint32
	uuid            [16]byte
	label           string
	lastMounted     string
	lastOrphan      uint32
	checksumPresent bool
	// raw is the superblock's 1024 bytes, for the structural checks.
	raw []byte
}

// parseSuperblock decodes raw (the 1024 bytes at offset 1024). It returns
// ErrNotExt4 without the magic and ErrBadSuperblock, with the evidence as
// detail, when the fields cannot describe a real filesystem.
func parseSuperblock(raw []byte) (*superblock, string, error) {
	if len(raw) < superblockSize {
		return nil, fmt.Sprintf("superblock is %d bytes, want %d", len(raw), superblockSize), ErrTruncated
	}
	le := binary.LittleEndian
	u16 := func(off int) uint16 { return le.Uint16(raw[off:]) }
	u32 := func(off int) uint32 { return le.Uint32(raw[off:]) }
	if m := u16(offMagic); m != ext4Magic {
		return nil, fmt.Sprintf("found 0x%04x at byte %d, want ext4 magic 0x%04x", m, superblockOffset+offMagic, ext4Magic), ErrNotExt4
	}
	sb := &superblock{
		inodesCount:    u32(offInodesCount),
		freeInodes:     u32(offFreeInodes),
		blocksCount:    uint64(u32(offBlocksCountLo)),
		freeBlocks:     uint64(u32(offFreeBlocksLo)),
		firstDataBlock: u32(offFirstDataBlock),
		blocksPerGroup: u32(offBlocksPerGroup),
		inodesPerGroup: u32(offInodesPerGroup),
		mountCount:     u16(offMntCount),
		state:          u16(offState),
		compat:         u32(offFeatureCompat),
		incompat:       u32(offFeatureIncompat),
		roCompat:       u32(offFeatureROCompat),
		label:          cString(raw[offVolumeName : offVolumeName+16]),
		lastMounted:    cString(raw[offLastMounted : offLastMounted+64]),
		lastOrphan:     u32(offLastOrphan),
		raw:            raw[:superblockSize:superblockSize],
	}
	copy(sb.uuid[:], raw[offUUID:offUUID+16])
	if sb.incompat&incompat64bit != 0 {
		sb.blocksCount |= uint64(u32(offBlocksCountHi)) << 32
		sb.freeBlocks |= uint64(u32(offFreeBlocksHi)) << 32
	}
	sb.mountTime = unixTime(u32(offMtime), raw[offMtimeHi])
	sb.writeTime = unixTime(u32(offWtime), raw[offWtimeHi])
	sb.mkfsTime = unixTime(u32(offMkfsTime), raw[offMkfsTimeHi])

	logBS := u32(offLogBlockSize)
	if logBS > 6 { // 1 KiB << 6 = 64 KiB, the largest ext4 block size
		return nil, fmt.Sprintf("log block size %d, want 0..6", logBS), ErrBadSuperblock
	}
	sb.blockSize = 1024 << logBS
	if rev := u32(offRevLevel); rev > 1 {
		return nil, fmt.Sprintf("revision %d, want 0 or 1", rev), ErrBadSuperblock
	}
	switch {
	case sb.blocksCount == 0 || sb.inodesCount == 0:
		return nil, fmt.Sprintf("%d blocks, %d inodes", sb.blocksCount, sb.inodesCount), ErrBadSuperblock
	case sb.blocksPerGroup == 0 || sb.inodesPerGroup == 0:
		return nil, fmt.Sprintf("%d blocks and %d inodes per group", sb.blocksPerGroup, sb.inodesPerGroup), ErrBadSuperblock
	case sb.freeBlocks > sb.blocksCount:
		return nil, fmt.Sprintf("%d free of %d blocks", sb.freeBlocks, sb.blocksCount), ErrBadSuperblock
	case sb.blockSize == 1024 && sb.firstDataBlock != 1, sb.blockSize > 1024 && sb.firstDataBlock != 0:
		return nil, fmt.Sprintf("first data block %d with %d-byte blocks", sb.firstDataBlock, sb.blockSize), ErrBadSuperblock
	case sb.blocksCount > (1<<63-1)/uint64(sb.blockSize):
		return nil, fmt.Sprintf("%d blocks of %d bytes overflow", sb.blocksCount, sb.blockSize), ErrBadSuperblock
	}
	if sb.roCompat&roCompatMetaCsum != 0 {
		if t := raw[offChecksumType]; t != 1 {
			return nil, fmt.Sprintf("checksum type %d, want 1 (crc32c)", t), ErrBadSuperblock
		}
		// ext4 stores crc32c(~0, data) without the final inversion that
		// hash/crc32 applies.
		want := le.Uint32(raw[offChecksum:])
		got := ^crc32.Checksum(raw[:offChecksum], castagnoli)
		if got != want {
			return nil, fmt.Sprintf("checksum 0x%08x, computed 0x%08x", want, got), ErrBadSuperblock
		}
		sb.checksumPresent = true
	}
	return sb, "", nil
}

// size is the filesystem size in bytes.
func (sb *superblock) size() int64 { return int64(sb.blocksCount) * sb.blockSize }

// dirty lists why the filesystem is not clean; empty means clean.
func (sb *superblock) dirty() []string {
	var why []string
	if sb.state&stateError != 0 {
		why = append(why, "errors recorded")
	}
	if sb.state&stateValid == 0 {
		why = append(why, "not unmounted cleanly")
	}
	if sb.incompat&incompatRecover != 0 {
		why = append(why, "journal needs recovery (mounted, or not unmounted cleanly)")
	}
	if sb.roCompat&roCompatOrphanExist != 0 || sb.lastOrphan != 0 {
		why = append(why, "orphan inodes pending")
	}
	return why
}

// features names the feature bits in e2fsprogs order (compat, incompat,
// ro_compat); unknown bits appear as e.g. "incompat_0x800000".
func (sb *superblock) features() []string {
	var out []string
	add := func(kind string, v uint32, names map[uint32]string) {
		for v != 0 {
			bit := uint32(1) << bits.TrailingZeros32(v)
			v &^= bit
			if n, ok := names[bit]; ok {
				out = append(out, n)
			} else {
				out = append(out, fmt.Sprintf("%s_0x%x", kind, bit))
			}
		}
	}
	add("compat", sb.compat, compatNames)
	add("incompat", sb.incompat, incompatNames)
	add("ro_compat", sb.roCompat, roCompatNames)
	return out
}

// uuidString formats the UUID the way blkid and dumpe2fs do.
func (sb *superblock) uuidString() string {
	u := sb.uuid
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// unixTime combines a 32-bit seconds field with its 8-bit high extension;
// 0 means never.
func unixTime(lo uint32, hi byte) time.Time {
	s := int64(lo) | int64(hi)<<32
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}
