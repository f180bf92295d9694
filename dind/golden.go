package dind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/volume"
)

// GoldenOptions describe a golden /var/lib/docker volume to build.
type GoldenOptions struct {
	Out   string   // the ext4 image file to create (must not exist)
	Size  int64    // its size
	Image string   // the dind image the seed sandbox runs (in containerd)
	Load  []string // image archives (docker save or OCI layout) to preload
}

// GoldenResult says what a golden build produced.
type GoldenResult struct {
	Images []string // repo:tag names dockerd has in the golden volume
	Info   volume.Info
}

// BuildGolden makes a golden volume: a seed sandbox on a fresh volume loads
// the archives (no registry), stops dockerd cleanly (its init also removes
// stale network state), and the result is verified clean. On failure the
// partial volume is removed.
func (r *Runner) BuildGolden(ctx context.Context, o GoldenOptions) (_ GoldenResult, retErr error) {
	var res GoldenResult
	for _, p := range o.Load {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return res, fmt.Errorf("golden: --load %s: not a readable image archive file", p)
		}
	}
	r.logf("golden: creating %s (%s)", o.Out, volume.FormatSize(o.Size))
	if _, err := volume.Create(ctx, o.Out, volume.CreateOptions{Size: o.Size, Label: "gvx-golden"}); err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(o.Out)
		}
	}()
	id := fmt.Sprintf("gvxgolden%d", time.Now().UnixNano())
	r.logf("golden: starting seed sandbox %s from %s", id, o.Image)
	sb, err := r.Start(ctx, id, o.Image, o.Out)
	if err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = sb.Kill(context.WithoutCancel(ctx))
		}
	}()
	r.logf("golden: dockerd ready after %s", sb.Ready.Round(time.Millisecond))
	for _, p := range o.Load {
		names, err := r.load(ctx, sb.Docker, p)
		if err != nil {
			return res, fmt.Errorf("golden: %w", err)
		}
		r.logf("golden: loaded %s from %s", names, filepath.Base(p))
	}
	if res.Images, err = sb.Docker.Images(ctx); err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	r.logf("golden: stopping dockerd cleanly")
	stopped = true
	if err := sb.Stop(ctx, time.Minute); err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	if err := loopdev.WaitDetached(ctx, o.Out); err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	r.logf("golden: verifying %s", o.Out)
	if err := volume.Check(ctx, o.Out); err != nil {
		return res, fmt.Errorf("golden: the volume is not clean after the seed stopped: %w", err)
	}
	if res.Info, err = volume.Inspect(ctx, o.Out); err != nil {
		return res, fmt.Errorf("golden: %w", err)
	}
	if !res.Info.Clean {
		return res, fmt.Errorf("golden: %s is not clean (%s) after the seed stopped", o.Out, res.Info.State)
	}
	return res, nil
}

// load streams one archive into dockerd, reporting progress on big ones.
func (r *Runner) load(ctx context.Context, d *Docker, path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var src io.Reader = f
	if r.Progress != nil && st.Size() > 64<<20 {
		src = &progressReader{r: f, total: st.Size(), name: filepath.Base(path), w: r.Progress, last: time.Now()}
	}
	names, err := d.Load(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return names, nil
}

type progressReader struct {
	r     io.Reader
	done  int64
	total int64
	name  string
	w     io.Writer
	last  time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if time.Since(p.last) > time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.w, "golden: loading %s: %d%%\n", p.name, p.done*100/p.total)
	}
	return n, err
}

// GoldenCheckpointDir is the checkpoint store `gvx golden build
// --checkpoint` keeps beside golden volume golden: a client connected with
// it as Options.CheckpointDir restores episodes from it.
func GoldenCheckpointDir(golden string) string { return golden + goldenCheckpointSuffix }

// goldenCheckpointSuffix names a golden checkpoint store; goldenSeedVolume
// is its seed's volume (the volume label of episodes restored from it).
const (
	goldenCheckpointSuffix = ".ckpt"
	goldenSeedVolume       = "seed.ext4"
)

// goldenHandleFile, in a golden checkpoint store, names its checkpoint.
const goldenHandleFile = "golden-checkpoint"

// GoldenCheckpoint is the id of the checkpoint in golden checkpoint store
// dir ("" and no error if it has none).
func GoldenCheckpoint(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, goldenHandleFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// CheckpointGolden saves a checkpoint of dockerd booted on golden volume
// golden into r.Client's checkpoint store (connect it with
// Options.CheckpointDir = GoldenCheckpointDir(golden), on the volume's
// filesystem for reflink copies): a seed sandbox of image starts on a
// clone of the volume, dockerd is warmed with one `docker run --rm` of
// each of warm (images the volume holds), and the sandbox is checkpointed
// — its processes, memory and the volume at the same paused instant —
// then removed. Episodes restored from it (RestoreEpisode) skip dockerd's
// start. The checkpoint's id is returned and recorded in the store.
func (r *Runner) CheckpointGolden(ctx context.Context, golden, image string, warm []string) (_ string, retErr error) {
	dir := GoldenCheckpointDir(golden)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	seedVol := filepath.Join(dir, goldenSeedVolume)
	_ = os.Remove(seedVol)
	if _, err := volume.Clone(ctx, golden, seedVol, volume.CloneOptions{}); err != nil {
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	id := fmt.Sprintf("gvxgoldenck%d", time.Now().UnixNano())
	r.logf("golden: starting checkpoint seed %s", id)
	sb, err := r.Start(ctx, id, image, seedVol)
	if err != nil {
		_ = os.Remove(seedVol)
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	defer func() {
		kctx := context.WithoutCancel(ctx)
		err := sb.Kill(kctx)
		if err == nil {
			err = loopdev.WaitDetached(kctx, seedVol)
		}
		if err == nil {
			err = os.Remove(seedVol)
		}
		if err != nil && retErr == nil {
			retErr = fmt.Errorf("golden checkpoint: remove the seed: %w", err)
		}
	}()
	for _, img := range warm {
		code, err := sb.Docker.Run(ctx, img, "true")
		if err == nil && code != 0 {
			err = fmt.Errorf("exited %d", code)
		}
		if err != nil {
			return "", fmt.Errorf("golden checkpoint: warm-up docker run of %s: %w", img, err)
		}
	}
	ck, err := sb.SDK.Checkpoint(ctx, gvx.CheckpointOptions{})
	if err != nil {
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, goldenHandleFile), []byte(ck.ID+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("golden checkpoint: %w", err)
	}
	r.logf("golden: checkpoint %s of dockerd (paused %s)", ck.ID, ck.Paused.Round(time.Millisecond))
	return ck.ID, nil
}
