package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/testfs"
	"github.com/gvxrun/gvx/volume"
)

// TestMain runs the tests in a private mount namespace (they mount).
func TestMain(m *testing.M) { os.Exit(testfs.RunPrivate(m, "GVX_CHECKPOINT_TEST_MNTNS")) }

func TestManifest(t *testing.T) {
	dir := t.TempDir()
	m := &Manifest{Task: "t1", Flags: "--network=none", Volumes: []Volume{{Destination: "/work", File: "gvx-volumes/0.ext4", Method: "reflink"}, {Destination: "/ro", ReadOnly: true}}}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("read %+v, want %+v", got, m)
	}
	if v, ok := got.Volume("/work"); !ok || v.File != "gvx-volumes/0.ext4" {
		t.Errorf("Volume(/work) = %+v, %v", v, ok)
	}
	if _, ok := got.Volume("/nope"); ok {
		t.Error("Volume of a destination it does not have")
	}
	if _, err := ReadManifest(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a gvx checkpoint") {
		t.Errorf("a directory without a manifest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("a manifest of another version: %v", err)
	}
	for _, file := range []string{"../../../var/lib/other.ext4", "/srv/volumes/a.ext4"} {
		bad := &Manifest{Task: "t1", Volumes: []Volume{{Destination: "/work", File: file}}}
		if err := bad.Write(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "not inside the image") {
			t.Errorf("a volume file %q out of the image: %v", file, err)
		}
	}
}

// TestSaveAndRestoreVolume: a volume mounted (as a sandbox has it) is
// frozen, copied while its writes are still in the host's cache, and the
// copy put back over the image later restores what was written before the
// copy and drops what came after.
func TestSaveAndRestoreVolume(t *testing.T) {
	testfs.RequireRoot(t)
	testfs.RequireTools(t, "mkfs.ext4", "debugfs")
	for _, fs := range []string{"xfs", "ext4"} {
		t.Run(fs, func(t *testing.T) {
			ctx := context.Background()
			dir := testfs.LoopFS(t, fs, "1G")
			img := filepath.Join(dir, "v.ext4")
			if _, err := volume.Create(ctx, img, volume.CreateOptions{Size: 64 << 20}); err != nil {
				t.Fatal(err)
			}
			lease, err := volume.Acquire(ctx, img, volume.AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release()
			mnt := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			testfs.Sh(t, "mount", "-o", "loop", img, mnt)
			mounted := true
			defer func() {
				if mounted {
					_ = exec.Command("umount", mnt).Run()
				}
			}()
			if err := os.WriteFile(filepath.Join(mnt, "before"), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			// On the volume's filesystem, where a reflink can share its blocks.
			ckpt := filepath.Join(dir, "ckpt")
			vols, err := SaveVolumes(ctx, ckpt, []Mounted{{Image: img, Destination: "/work"}, {Image: "/unused.ext4", Destination: "/ro", ReadOnly: true}}, []int{os.Getpid()})
			if err != nil {
				t.Fatal(err)
			}
			if len(vols) != 2 || vols[0].File == "" || vols[1].File != "" || !vols[1].ReadOnly {
				t.Fatalf("saved %+v", vols)
			}
			if fs == "xfs" && vols[0].Method != string(volume.MethodReflink) {
				t.Errorf("on XFS the copy was made by %s, want a reflink", vols[0].Method)
			}
			// Thawed: the filesystem takes writes again.
			if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("2"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(mnt, "before")); err != nil {
				t.Fatal(err)
			}
			testfs.Sh(t, "umount", mnt)
			mounted = false
			lease.Release()
			if err := RestoreVolume(ctx, filepath.Join(ckpt, vols[0].File), img); err != nil {
				t.Fatal(err)
			}
			ls := testfs.Sh(t, "debugfs", "-R", "ls /", img)
			if !strings.Contains(ls, "before") || strings.Contains(ls, "after") {
				t.Errorf("restored volume lists %q, want before and not after", ls)
			}
			if info, err := volume.Inspect(ctx, img); err != nil || !info.Clean {
				t.Errorf("restored volume: %+v, %v; want a clean image", info, err)
			}
			// A volume in use cannot be restored over.
			l2, err := volume.Acquire(ctx, img, volume.AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Release()
			if err := RestoreVolume(ctx, filepath.Join(ckpt, vols[0].File), img); err == nil || !strings.Contains(err.Error(), "in use") {
				t.Errorf("restore over a leased volume: %v, want it refused as in use", err)
			}
		})
	}
}

func TestSaveVolumeNotMounted(t *testing.T) {
	testfs.RequireRoot(t)
	img := filepath.Join(t.TempDir(), "v.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := SaveVolumes(context.Background(), t.TempDir(), []Mounted{{Image: img, Destination: "/w"}}, []int{os.Getpid()})
	if err == nil || !strings.Contains(err.Error(), "not mounted") || !strings.Contains(err.Error(), "/w") {
		t.Errorf("a volume no sandbox process has mounted: %v", err)
	}
}

// TestSaveRoot: a pool sandbox's root container spec goes into the image
// directory and the manifest records its id and flags; a bundle without
// a spec is an error naming the root container.
func TestSaveRoot(t *testing.T) {
	bundle, dir := t.TempDir(), t.TempDir()
	spec := []byte(`{"process":{"args":["/pause"]}}`)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := SaveRoot(dir, bundle, "gvxpool-1", "--network=none")
	if err != nil {
		t.Fatal(err)
	}
	if *root != (Root{ID: "gvxpool-1", Flags: "--network=none"}) {
		t.Errorf("root %+v", root)
	}
	if got, err := os.ReadFile(filepath.Join(dir, RootSpecFile)); err != nil || string(got) != string(spec) {
		t.Errorf("saved spec %q, %v; want %q", got, err, spec)
	}
	m := &Manifest{Task: "t1", Root: root}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadManifest(dir); err != nil || got.Root == nil || *got.Root != *root {
		t.Errorf("manifest read back: %+v, %v", got, err)
	}
	if _, err := SaveRoot(t.TempDir(), t.TempDir(), "gvxpool-2", ""); err == nil || !strings.Contains(err.Error(), "root container gvxpool-2") {
		t.Errorf("a bundle without a spec: %v", err)
	}
}

// TestDedupe: on XFS, a child file holding the parent's blocks in another
// order, with new blocks between them, shares exactly those blocks' storage
// with the parent afterwards (the filesystem's free space grows by as
// much), and reads as before; on ext4 it says the filesystem cannot.
func TestDedupe(t *testing.T) {
	dir := testfs.LoopFS(t, "xfs", "512M")
	const blocks = 1024 // 4 MiB
	parent := make([]byte, blocks*dedupeBlock)
	if _, err := rand.Read(parent); err != nil {
		t.Fatal(err)
	}
	// The child: the parent's second half, 64 new blocks, the first half
	// but its first 32 blocks (rewritten), as memory shifts between two
	// checkpoints.
	fresh := make([]byte, 96*dedupeBlock)
	if _, err := rand.Read(fresh); err != nil {
		t.Fatal(err)
	}
	half := blocks / 2 * dedupeBlock
	child := append(append(append([]byte{}, parent[half:]...), fresh[:64*dedupeBlock]...), fresh[64*dedupeBlock:]...)
	child = append(child, parent[32*dedupeBlock:half]...)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pp, cp := write("parent", parent), write("child", child)
	exec.Command("sync").Run()
	free := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bfree) * st.Bsize
	}
	before := free()
	st, err := Dedupe(context.Background(), cp, pp)
	if err != nil {
		t.Fatal(err)
	}
	wantBlocks := blocks - 32
	if st.Blocks != wantBlocks || st.Shared != int64(wantBlocks*dedupeBlock) || st.Size != int64(len(child)) {
		t.Errorf("dedupe: %+v, want %d blocks (%d bytes) shared of %d", st, wantBlocks, wantBlocks*dedupeBlock, len(child))
	}
	exec.Command("sync").Run()
	if gained := free() - before; gained < int64(wantBlocks*dedupeBlock)*9/10 {
		t.Errorf("free space grew by %d bytes, want about %d", gained, wantBlocks*dedupeBlock)
	}
	if got, err := os.ReadFile(cp); err != nil || !bytes.Equal(got, child) {
		t.Errorf("the child reads differently after the dedupe (%v)", err)
	}
	ext4 := testfs.LoopFS(t, "ext4", "64M")
	a, b := filepath.Join(ext4, "a"), filepath.Join(ext4, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, parent[:64*dedupeBlock], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Dedupe(context.Background(), b, a); !errors.Is(err, ErrNoDedupe) {
		t.Errorf("dedupe on ext4: %v, want ErrNoDedupe", err)
	}
}

// TestManifestFiles: the manifest records the sizes of gVisor's image
// files, and an image whose files were cut short or are missing is
// refused, naming the file, before any restore.
func TestManifestFiles(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{api.CheckpointStateFile: 3000, api.CheckpointPagesMetaFile: 10, api.CheckpointPagesFile: 8192} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manifest{Task: "t1"}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	if m.Files[api.CheckpointStateFile] != 3000 || m.Files[api.CheckpointPagesFile] != 8192 {
		t.Errorf("recorded sizes %v", m.Files)
	}
	if _, err := ReadManifest(dir); err != nil {
		t.Fatalf("an intact image: %v", err)
	}
	if err := os.Truncate(filepath.Join(dir, api.CheckpointStateFile), 64); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "damaged: checkpoint.img is 64 bytes, 3000") {
		t.Errorf("a state file cut short: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, api.CheckpointStateFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a state file gone: %v", err)
	}
}

// TestRestoreVolumeChecksCopyOnce: restores of one checkpoint copy into
// new images check the copy once (e2fsck runs once, counted by a wrapper
// on PATH) and the leases of every clone then need no check; a damaged
// copy is refused, naming it, and nothing is made.
func TestRestoreVolumeChecksCopyOnce(t *testing.T) {
	testfs.RequireRoot(t)
	testfs.RequireTools(t, "mkfs.ext4", "e2fsck")
	ctx := context.Background()
	dir := testfs.LoopFS(t, "xfs", "1G")
	img := filepath.Join(dir, "v.ext4")
	if _, err := volume.Create(ctx, img, volume.CreateOptions{Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	// A copy made outside gvx carries no verified mark, as a checkpoint's
	// copy of a volume a sandbox wrote does not.
	copyPath := filepath.Join(dir, "copy.ext4")
	testfs.Sh(t, "cp", "--sparse=always", img, copyPath)
	real, err := exec.LookPath("e2fsck")
	if err != nil {
		t.Fatal(err)
	}
	bin, count := t.TempDir(), filepath.Join(t.TempDir(), "count")
	wrapper := "#!/bin/sh\necho run >> " + count + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "e2fsck"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	runs := func() int {
		data, _ := os.ReadFile(count)
		return strings.Count(string(data), "run")
	}
	for i := 0; i < 3; i++ {
		dst := filepath.Join(dir, fmt.Sprintf("r%d.ext4", i))
		if err := RestoreVolume(ctx, copyPath, dst); err != nil {
			t.Fatal(err)
		}
		lease, err := volume.Acquire(ctx, dst, volume.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lease.Release()
	}
	if n := runs(); n != 1 {
		t.Errorf("e2fsck ran %d times for three restores of one copy and their leases, want once (the copy's)", n)
	}
	// A copy damaged after it was checked loses its mark (its state
	// changed) and is refused.
	f, err := os.OpenFile(copyPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x01, 0x00, 0x01, 0x00}, 1024+0x60); err != nil { // unknown incompat features
		t.Fatal(err)
	}
	f.Close()
	bad := filepath.Join(dir, "bad.ext4")
	if err := RestoreVolume(ctx, copyPath, bad); err == nil || !strings.Contains(err.Error(), "checkpoint's copy") {
		t.Errorf("restore of a damaged copy: %v, want it refused naming the checkpoint's copy", err)
	}
	if _, err := os.Lstat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused restore left %s (%v)", bad, err)
	}
}
