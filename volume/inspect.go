package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// Info is what Inspect reads from an image: the superblock's view of the
// filesystem plus the image file's own size and allocation.
type Info struct {
	// Path is the image file as given.
	Path string `json:"path"`
	// Size is the filesystem size in bytes (blocks × block size).
	Size int64 `json:"size"`
	// Used and Free are bytes in used and free blocks, per the superblock
	// (the kernel updates these counters lazily while mounted).
	Used int64 `json:"used"`
	Free int64 `json:"free"`
	// BlockSize is the filesystem block size in bytes.
	BlockSize int64 `json:"block_size"`
	// Inodes and FreeInodes count inodes in total and free.
	Inodes     int64 `json:"inodes"`
	FreeInodes int64 `json:"free_inodes"`
	// Clean is true when the superblock says unmounted cleanly, no errors,
	// no journal to replay and no orphans. Clone and Acquire refuse
	// images that are not clean unless forced.
	Clean bool `json:"clean"`
	// State is "clean" or the reasons the image is not clean.
	State string `json:"state"`
	// Features are the ext4 feature names, as dumpe2fs prints them.
	Features []string `json:"features"`
	// Label is the volume name (mkfs.ext4 -L).
	Label string `json:"label"`
	// UUID is the filesystem UUID. Clones share their source's UUID.
	UUID string `json:"uuid"`
	// LastMounted is the directory the filesystem was last mounted on.
	LastMounted string `json:"last_mounted"`
	// LastMountTime, LastWriteTime and Created are zero when unset.
	LastMountTime time.Time `json:"last_mount_time"`
	LastWriteTime time.Time `json:"last_write_time"`
	Created       time.Time `json:"created"`
	// MountCount counts mounts since the last full check.
	MountCount int `json:"mount_count"`
	// FileSize is the image file's length; Allocated is the disk space it
	// occupies (st_blocks × 512), which is far less for a sparse image.
	FileSize  int64 `json:"file_size"`
	Allocated int64 `json:"allocated"`
}

// Inspect reads and validates the ext4 superblock of the image at path. It
// never mounts anything and never writes. A file that is not ext4 gives
// ErrNotExt4, one shorter than 2048 bytes or than the filesystem it
// describes gives ErrTruncated, and an inconsistent superblock gives
// ErrBadSuperblock, each as an *Error naming the file and the fix. A dirty
// image is not an error here: see Info.Clean.
func Inspect(ctx context.Context, path string) (Info, error) {
	f, err := openImage(path, os.O_RDONLY)
	if err != nil {
		return Info{}, fmt.Errorf("inspect %s: %w", path, err)
	}
	defer f.Close()
	info, _, err := inspectFile(f, path)
	if err != nil {
		return Info{}, withOp("inspect", err)
	}
	return info, nil
}

// openImage opens path and checks that it is a regular file.
func openImage(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is a %s, not an image file", path, kind(st.Mode()))
	}
	return f, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

// inspectFile validates the open image f and returns its Info and the
// decoded superblock.
func inspectFile(f *os.File, path string) (Info, *superblock, error) {
	st, err := f.Stat()
	if err != nil {
		return Info{}, nil, err
	}
	fileSize := st.Size()
	if fileSize < superblockOffset+superblockSize {
		return Info{}, nil, &Error{Path: path, Err: ErrTruncated,
			Detail: fmt.Sprintf("file is %d bytes, an ext4 superblock ends at byte %d", fileSize, superblockOffset+superblockSize),
			Fix:    "it is not a usable image: restore it from its source or create a new one with `gvx volume create`"}
	}
	raw := make([]byte, superblockSize)
	if _, err := f.ReadAt(raw, superblockOffset); err != nil && !errors.Is(err, io.EOF) {
		return Info{}, nil, fmt.Errorf("read superblock of %s: %w", path, err)
	}
	sb, detail, err := parseSuperblock(raw)
	if err != nil {
		e := &Error{Path: path, Err: err, Detail: detail}
		switch {
		case errors.Is(err, ErrNotExt4):
			e.Fix = "give an image made by `gvx volume create` (mkfs.ext4); nothing was mounted or changed"
		default:
			e.Fix = "the superblock is damaged: try `e2fsck -fy -b 32768 " + path + "` on a copy, or restore the image from its source"
		}
		return Info{}, nil, e
	}
	if fileSize < sb.size() {
		return Info{}, nil, &Error{Path: path, Err: ErrTruncated,
			Detail: fmt.Sprintf("file is %d bytes, the filesystem is %d blocks × %d = %d bytes", fileSize, sb.blocksCount, sb.blockSize, sb.size()),
			Fix:    "the copy was cut short (interrupted clone or full disk): clone it again from its source"}
	}
	why := sb.dirty()
	state := "clean"
	if len(why) > 0 {
		state = strings.Join(why, ", ")
	}
	var allocated int64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		allocated = sys.Blocks * 512
	}
	return Info{
		Path:          path,
		Size:          sb.size(),
		Used:          int64(sb.blocksCount-sb.freeBlocks) * sb.blockSize,
		Free:          int64(sb.freeBlocks) * sb.blockSize,
		BlockSize:     sb.blockSize,
		Inodes:        int64(sb.inodesCount),
		FreeInodes:    int64(sb.freeInodes),
		Clean:         len(why) == 0,
		State:         state,
		Features:      sb.features(),
		Label:         sb.label,
		UUID:          sb.uuidString(),
		LastMounted:   sb.lastMounted,
		LastMountTime: sb.mountTime,
		LastWriteTime: sb.writeTime,
		Created:       sb.mkfsTime,
		MountCount:    int(sb.mountCount),
		FileSize:      fileSize,
		Allocated:     allocated,
	}, sb, nil
}

// notClean is the error for an image whose superblock is not clean.
func notClean(path string, info Info, fix string) error {
	return &Error{Path: path, Err: ErrNotClean, Detail: info.State, Fix: fix}
}
