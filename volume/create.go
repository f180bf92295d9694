package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// MinSize is the smallest image Create makes: below 8 MiB mkfs.ext4 has
// no room for a journal and silently leaves it out.
const MinSize = 8 << 20

// BlockSize is the ext4 block size of images made by Create.
const BlockSize = 4096

// CreateOptions describe a new image.
type CreateOptions struct {
	// Size of the filesystem (and the sparse image file) in bytes; a
	// multiple of BlockSize, at least MinSize.
	Size int64
	// Label is the ext4 volume name, at most 16 bytes (optional).
	Label string
	// Owner, when set, owns the root directory (mkfs.ext4 -E root_owner):
	// a sandbox running as host uid 100000 needs the root owned by
	// 100000:100000 to write into a fresh volume. Nil leaves it 0:0.
	Owner *Owner
}

// Owner is a numeric host uid and gid.
type Owner struct {
	UID, GID uint32
}

// String formats the owner as "uid:gid".
func (o Owner) String() string { return fmt.Sprintf("%d:%d", o.UID, o.GID) }

// ParseOwner parses "uid:gid" (numbers only).
func ParseOwner(s string) (Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Owner{}, fmt.Errorf("owner %q: want numeric UID:GID, e.g. 100000:100000", s)
	}
	return Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}

// mkfsArgs are the mkfs.ext4 options for a volume image; see the package
// documentation for why each is there.
func mkfsArgs(path string, opts CreateOptions) []string {
	ext := "lazy_itable_init=0,lazy_journal_init=1"
	if opts.Owner != nil {
		ext += ",root_owner=" + opts.Owner.String()
	}
	args := []string{"-F", "-q", "-b", strconv.Itoa(BlockSize), "-m", "0", "-E", ext}
	if opts.Label != "" {
		args = append(args, "-L", opts.Label)
	}
	return append(args, path)
}

// Create makes a new sparse image file at path holding an empty ext4
// filesystem of opts.Size bytes. It never overwrites: an existing path
// gives ErrExists. On failure nothing is left behind.
func Create(ctx context.Context, path string, opts CreateOptions) (Info, error) {
	if err := validateCreate(opts); err != nil {
		return Info{}, fmt.Errorf("create %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Info{}, fmt.Errorf("create %s: %w", path, err)
	}
	f, err := createExclusive(abs, path, "create")
	if err != nil {
		return Info{}, err
	}
	ok := false
	defer func() {
		flock.Close(f)
		if !ok {
			os.Remove(abs)
		}
	}()
	if err := f.Truncate(opts.Size); err != nil {
		return Info{}, fmt.Errorf("create %s: size: %w", path, err)
	}
	res, err := run(ctx, "mkfs.ext4", mkfsArgs(abs, opts)...)
	if err != nil {
		return Info{}, fmt.Errorf("create %s: %w", path, err)
	}
	if res.exitCode != 0 {
		return Info{}, fmt.Errorf("create %s: mkfs.ext4 exit %d: %s", path, res.exitCode, summary(res.output, 3))
	}
	if err := syncFileAndDir(f, abs); err != nil {
		return Info{}, fmt.Errorf("create %s: %w", path, err)
	}
	info, sb, err := inspectFile(f, path)
	if err != nil {
		return Info{}, withOp("create", err)
	}
	// gvx's own mkfs.ext4 image: its structure is checked (a wrong mkfs.conf
	// would show here, not at first use) and it is marked without e2fsck.
	if err := verifyWith(ctx, f, path, info, sb, true, false); err != nil {
		return Info{}, withOp("create", err)
	}
	ok = true
	log.G(ctx).WithField("volume", path).WithField("size", opts.Size).Debug("volume created")
	return info, nil
}

func validateCreate(opts CreateOptions) error {
	switch {
	case opts.Size < MinSize:
		return fmt.Errorf("size %d is below the minimum %s (smaller images have no room for a journal)", opts.Size, FormatSize(MinSize))
	case opts.Size%BlockSize != 0:
		return fmt.Errorf("size %d is not a multiple of the %d-byte block size; use a K, M, G or T size such as 4G", opts.Size, BlockSize)
	case len(opts.Label) > 16:
		return fmt.Errorf("label %q is %d bytes, ext4 allows at most 16", opts.Label, len(opts.Label))
	case strings.ContainsAny(opts.Label, "\x00\n"):
		return fmt.Errorf("label %q contains a NUL or newline", opts.Label)
	}
	return nil
}

// createExclusive creates abs with O_EXCL (mode 0600: images hold sandbox
// data) and locks it exclusively so no one can acquire it half made.
func createExclusive(abs, path, op string) (*os.File, error) {
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, &Error{Op: op, Path: path, Err: ErrExists,
			Fix: "choose a new name, or remove the old image first with `gvx volume rm`; it was not touched"}
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, path, err)
	}
	if err := lockFile(f, path, unix.LOCK_EX); err != nil {
		f.Close()
		os.Remove(abs)
		return nil, withOp(op, err)
	}
	return f, nil
}

// syncFileAndDir makes f's data and its directory entry durable.
func syncFileAndDir(f *os.File, abs string) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	d, err := os.Open(filepath.Dir(abs))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}
