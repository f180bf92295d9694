// Package snapshotter is the ext4lite containerd snapshotter.
//
// It is a snapshots.Snapshotter (and snapshots.Cleaner) that keeps every
// snapshot as one sparse ext4 image file and makes each new snapshot a
// reflink clone of its parent, so that unpacking an image and starting a
// container never copy whole files on XFS or btrfs.
//
// # Model
//
// A committed snapshot is a complete ext4 filesystem: the parent's
// filesystem plus the layer applied on top of it. Prepare and View clone
// the parent's image (volume.Clone: FICLONE, else a sparse
// copy_file_range, else a sparse read/write copy); a snapshot without a
// parent is a clone of a cached empty template, made once per size with
// volume.Create and with lost+found removed, so that an unpacked image
// holds exactly the image's files. The size is the label
// containerd.io/snapshot/max-size, or Config.DefaultSize.
//
// Mounts are one loop mount of the image:
//
//	{Type: "ext4", Source: ROOT/snapshots/ID, Options: ["loop", "rw"]}   // active
//	{Type: "ext4", Source: ROOT/snapshots/ID, Options: ["loop", "ro"]}   // view
//
// which containerd's mount package, its differ (to apply layers) and
// runc understand.
//
// Metadata lives in containerd's snapshot storage (bolt, package
// core/snapshots/storage) in ROOT/metadata.db.
//
// # Layout
//
//	ROOT/lock                one process per root (flock)
//	ROOT/metadata.db         snapshot metadata
//	ROOT/snapshots/ID        the image of snapshot ID
//	ROOT/snapshots/new-*     a clone being made (not yet in the metadata)
//	ROOT/snapshots/rm-*      an image being deleted
//	ROOT/templates/empty-N   the empty template of N bytes
//	ROOT/templates/new-*     a template being made
//
// # Crash safety
//
// Cloning is slow on filesystems without reflink, so it never happens
// inside a metadata transaction (containerd's blockfile snapshotter
// copies inside its bolt transaction, which serializes every Prepare
// behind the slowest copy). Each operation orders its steps so that a
// kill -9 between any two of them leaves a state the next start repairs:
//
//   - Prepare/View: clone to snapshots/new-*, then in one write
//     transaction create the metadata and rename the clone to
//     snapshots/ID (and fsync the directory) before the transaction
//     commits. An image therefore exists before metadata names it; a
//     crash leaves at most an unreferenced file.
//   - Commit: check that the image is an unmounted, clean ext4
//     filesystem (replaying its journal with e2fsck -fp if it was left
//     dirty and is not attached to a loop device), fsync it, measure its
//     usage, then commit the metadata. No file moves.
//   - Remove: delete the metadata, then the file. IDs come from a bolt
//     sequence that only moves forward on commit, so a left-over file is
//     never mistaken for a later snapshot.
//   - Cleanup (also run at start): in a write transaction (so it cannot
//     race a Prepare's rename) rename image files that no snapshot
//     references to rm-*, then delete rm-* and abandoned new-* files.
//
// Config.Hook is called at named points between these steps; tests use
// it to kill the process there (see Hook* constants).
//
// # Usage
//
// Usage counts the bytes of the image file that are allocated and not
// shared with another file (FIEMAP, FIEMAP_EXTENT_SHARED): on a reflink
// filesystem that is what the snapshot added to its parent; on one
// without reflink every snapshot owns a full sparse copy, and that is
// what it costs. Committed snapshots keep the value measured at Commit.
// Inodes is 1: the host inode of the image.
package snapshotter
