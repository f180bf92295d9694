// Package volume manages ext4lite volumes.
//
// An ext4lite volume is a sandbox directory such as /var/lib/docker that
// lives in one sparse ext4 image file, made once as a golden image and
// cloned per episode, by reflink where the host filesystem can (XFS,
// btrfs), in milliseconds.
//
// # Image format
//
// Create runs e2fsprogs:
//
//	mkfs.ext4 -F -q -b 4096 -m 0 -E lazy_itable_init=0,lazy_journal_init=1[,root_owner=UID:GID] [-L LABEL] IMG
//
// on a new file that was just extended with ftruncate, so it starts as one
// hole:
//
//   - -F -q: the target is a regular file (no "proceed anyway?"), and quiet.
//   - -b 4096: the same block size at every size; below 512 MiB mke2fs
//     would otherwise pick 1 KiB blocks.
//   - -m 0: no blocks reserved for root; the volume belongs to one sandbox.
//   - lazy_itable_init=0: never leave inode tables for the kernel's
//     ext4lazyinit thread, which would otherwise zero them on the first
//     mount of every clone, writing (and unsharing) tens of MiB per
//     episode. On a file mke2fs punches the whole range first and then
//     knows the tables read as zeros, so this costs nothing: a 4 GiB image
//     is made in milliseconds either way.
//   - lazy_journal_init=1: do not write zeros over the journal. The file is
//     brand new and sparse, so the journal already reads as zeros; zeroing
//     it would only allocate 64 MiB per 4 GiB image (measured: 66 MiB vs 2
//     MiB allocated).
//   - The journal is kept (no -O ^has_journal): a host crash while a
//     sandbox writes leaves a recoverable volume, and unused it costs no
//     space.
//   - root_owner (CreateOptions.Owner): the root directory's owner. gvx
//     sandboxes run as host uid 100000 by default, and need to own the
//     root of a fresh volume to write to it; nil leaves 0:0.
//   - lost+found is always created by mke2fs (root, 0700); it is harmless.
//
// Images smaller than MinSize (8 MiB) are refused: mke2fs would leave out
// the journal. Image files are created mode 0600.
//
// # Clean state
//
// Inspect parses the superblock itself (it never mounts or writes), and
// Clean means: s_state has "valid" and not "error", no journal recovery is
// pending (needs_recovery, set while mounted read-write) and no orphan
// inodes. Clone and Acquire refuse an image that is not clean unless
// forced: a golden image must be unmounted cleanly before it is cloned.
// Clones share their source's UUID, which ext4 tolerates.
//
// # Cloning
//
// Clone tries FICLONE first (reflink: shares every extent, O(1)). Where
// that is not supported it copies only the source's data regions, found
// with SEEK_DATA/SEEK_HOLE, with copy_file_range, falling back to
// read/write (skipping all-zero pieces) when the kernel refuses
// copy_file_range (EXDEV, EOPNOTSUPP, ENOSYS, EINVAL), so the clone stays
// as sparse as its source. The destination is created with O_EXCL (never
// overwritten), gets its final length only after the last region (an
// interrupted copy shows as truncated), is fsynced with its directory, and
// is removed on any failure.
//
// # Locking
//
// Images are locked with flock(2) on the image file, never blocking:
//
//   - Acquire takes LOCK_EX and returns a Lease, which the shim holds while
//     a sandbox uses the image; a second Acquire fails with ErrInUse. The
//     lock dies with the descriptor, so a crashed holder frees the image.
//   - Clone takes the source LOCK_SH: any number of clones of one golden
//     image may run at once, but not while it is leased, and it cannot be
//     leased while being cloned. The destination is LOCK_EX until done.
//   - Resize and Remove take LOCK_EX; Check takes LOCK_SH. These three
//     also refuse an image attached to a loop device (found through
//     /sys/block/loop*/loop/backing_file), i.e. mounted without a lease.
//
// flock is advisory: mount(8) and e2fsprogs ignore it. It protects users
// of this package from each other, not from the root shell.
package volume
