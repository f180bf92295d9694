package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/internal/digest"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/sandbox"
	"github.com/gvxrun/gvx/sandbox/control"
)

// Checkpoint saves sb's whole state — kernel, memory and volumes, taken at
// one paused instant — and returns its handle once it is saved. The
// sandbox runs on.
func (e *Engine) Checkpoint(ctx context.Context, sb *Sandbox) (*Handle, error) {
	h, err := e.CheckpointAsync(ctx, sb)
	if err != nil {
		return nil, err
	}
	if err := e.Wait(ctx, h.ID); err != nil {
		return nil, err
	}
	return h, nil
}

// CheckpointAsync is Checkpoint returning at the paused instant: the handle
// names that instant's state, which the engine saves meanwhile with the
// sandbox kept paused (gVisor serialises its kernel and copies its memory,
// then the volumes are copied). Calls on the sandbox (and Rollback or Fork
// to the handle) wait until it is saved; Wait reports how the save went. An
// RL loop thus pays the pause, not the save, on its critical path.
func (e *Engine) CheckpointAsync(ctx context.Context, sb *Sandbox) (*Handle, error) {
	sb.mu.Lock()
	unlock := true
	defer func() {
		if unlock {
			sb.mu.Unlock()
		}
	}()
	if sb.cur == nil {
		return nil, fmt.Errorf("checkpoint %s: the sandbox was destroyed", sb.ID)
	}
	if err := sb.settle(); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: checkpoint %s: its backing's labels", sb.ID)
	}
	b := sb.cur
	info, err := b.container.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	spec, err := b.container.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	flags, err := os.ReadFile(filepath.Join(e.layout.TaskDir(namespaceOf(ctx), b.id), api.FlagsFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: its gvx-sentry flags: %w (is it a gvx task? members of CRI pods cannot be checkpointed)", sb.ID, err)
	}
	if err := checkpointable(string(flags)); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	pooled, err := e.poolSandbox(namespaceOf(ctx), b.id)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	st, err := e.readState(namespaceOf(ctx), b.id)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	nat, onNAT, err := st.nat(b.id)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	if ports := userPorts(nat.Ports, e.layout.DockerRelaySocket(namespaceOf(ctx), b.id)); onNAT && len(ports) > 0 {
		return nil, fmt.Errorf("checkpoint %s: %w: its NAT publishes host ports (%s), which a rollback or a fork would need a second time while this sandbox holds them; "+
			"publish none (reach the guest's ports through its NAT instead: the SDK's Sandbox.DialPort, gvx port-forward), or checkpoint it through containerd (ctr c checkpoint) and restore once it is gone", sb.ID, ErrNotCheckpointable, strings.Join(ports, ", "))
	}
	// A NAT sandbox is checked once paused (natQuiet).
	if !onNAT && mayConnectOut(string(flags), st.Sandbox.Pid) {
		if err := e.outsideTCP(ctx, b, spec); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
		}
	}
	if dockerMode(string(flags)) {
		if err := e.innerTCP(ctx, b, spec); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
		}
	}
	ctl, err := e.control(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	rt := &Runtime{Name: info.Runtime.Name}
	if o := info.Runtime.Options; o != nil {
		rt.OptionsType, rt.Options = o.GetTypeUrl(), o.GetValue()
	}
	h, err := e.store.newHandle(Handle{Parent: sb.parent, Lineage: sb.lineage, Sandbox: sb.ID, Image: info.Image, Snapshotter: info.Snapshotter, Runtime: rt, Labels: ownLabels(info.Labels)})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := e.pause(ctx, b); err != nil {
		_ = e.store.remove(h.ID)
		return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
	}
	if onNAT {
		if err := e.natQuiet(ctx, b, spec); err != nil {
			_ = e.store.remove(h.ID)
			return nil, fmt.Errorf("checkpoint %s: %w", sb.ID, err)
		}
	}
	p := e.pending(h.ID)
	unlock = false
	e.background(ctx, "checkpoint "+h.ID, func(bctx context.Context) error {
		defer sb.mu.Unlock()
		err := e.save(bctx, ctl, h, b.id, string(flags), spec, pooled)
		h.Paused = time.Since(t0)
		if rerr := e.resume(bctx, b); rerr != nil && err == nil {
			err = rerr
		}
		if err == nil {
			err = e.store.save(h)
		}
		if err != nil {
			_ = e.store.remove(h.ID)
			err = fmt.Errorf("checkpoint %s of %s: %w", h.ID, sb.ID, err)
		} else {
			sb.parent = h.ID
			e.fillSpares(bctx, h)
			e.fillTarget(bctx, h)
			if h.Parent != "" && !e.opts.NoDedupe {
				e.startDedupe(bctx, h)
			}
		}
		p.finish(err)
		if err == nil {
			// Recorded on the backing (an fsync of containerd's, after
			// Wait returns) for a later process that adopts it.
			if _, lerr := b.container.SetLabels(bctx, map[string]string{labelParent: h.ID}); lerr != nil {
				log.G(bctx).WithError(lerr).Warnf("gvx rollout: checkpoint %s: label %s's backing", h.ID, sb.ID)
			}
		}
		return err
	})
	return h, nil
}

// startDedupe runs dedupe of handle h in the background, once its
// parent's own dedupe (if one runs) is done. In that order a chain of
// checkpoints keeps one copy of what they share: deduplicating the
// parent after the child would move the parent onto the grandparent's
// blocks and leave the child alone on the parent's old ones — two copies
// (seen: 6 checkpoints at 256 MiB cost 546–806 MiB instead of ≈ 280).
func (e *Engine) startDedupe(ctx context.Context, h *Handle) {
	done := make(chan struct{})
	e.mu.Lock()
	prev := e.dedupes[h.Parent]
	e.dedupes[h.ID] = done
	e.mu.Unlock()
	e.background(ctx, "dedupe "+h.ID, func(ctx context.Context) error {
		defer func() {
			e.mu.Lock()
			delete(e.dedupes, h.ID)
			e.mu.Unlock()
			close(done)
		}()
		if prev != nil {
			<-prev
		}
		return e.dedupe(ctx, h)
	})
}

// dedupe makes the memory of saved handle h share storage with its
// parent's wherever their pages are equal (checkpoint.Dedupe): h then
// costs on disk the pages written since its parent. Nothing to do on a
// store that cannot share blocks, or once the parent is released.
func (e *Engine) dedupe(ctx context.Context, h *Handle) error {
	child := filepath.Join(e.store.ImageDir(h.ID), api.CheckpointPagesFile)
	parent := filepath.Join(e.store.ImageDir(h.Parent), api.CheckpointPagesFile)
	t0 := time.Now()
	st, err := checkpoint.Dedupe(ctx, child, parent)
	switch {
	case errors.Is(err, checkpoint.ErrNoDedupe):
		log.G(ctx).Debugf("gvx rollout: checkpoint %s not deduplicated: %v", h.ID, err)
		return nil
	case errors.Is(err, os.ErrNotExist):
		return nil // released meanwhile
	case err != nil:
		return err
	}
	log.G(ctx).Debugf("gvx rollout: checkpoint %s: %d of its %d MiB of memory share storage with %s's (%s)", h.ID, st.Shared>>20, st.Size>>20, h.Parent, time.Since(t0))
	return nil
}

// natQuiet refuses NAT backing b, paused, if its guest holds a TCP
// connection through the NAT to a peer outside (outsideTCP), leaving it
// running then. Every such connection is a flow of the NAT's, which
// counts it open in its stats file before the guest's handshake completes
// (and writes the count at once), so a paused guest whose NAT counts no
// open flow holds none and is not asked (an exec: ≈ 100 ms on a 2-core
// machine). Otherwise — flows open (UDP ones too), or no readable count —
// the guest runs again for the check and is paused after it.
func (e *Engine) natQuiet(ctx context.Context, b *backing, spec *specs.Spec) error {
	root := api.SentryRoot(filepath.Join(e.layout.SentryRoot(b.id), namespaceOf(ctx)))
	if data, err := os.ReadFile(root.NATStats(b.id)); err == nil {
		var st api.NATStats
		if json.Unmarshal(data, &st) == nil && st.Open == 0 {
			return nil
		}
	}
	if err := e.resume(ctx, b); err != nil {
		return err
	}
	if err := e.outsideTCP(ctx, b, spec); err != nil {
		return err
	}
	return e.pause(ctx, b)
}

// dockerMode says whether gvx-sentry flags flags are a docker-mode
// sandbox's.
func dockerMode(flags string) bool {
	f := strings.Fields(flags)
	for _, want := range oci.DockerProxySentryFlags {
		if !slices.Contains(f, want) {
			return false
		}
	}
	return true
}

// userPorts is the ports a NAT publishes but the one the shim adds for a
// docker-mode sandbox's gvx-relay (unix socket relay): that one is the
// backing's own, and each restored backing publishes its own.
func userPorts(ports []string, relay string) []string {
	var out []string
	for _, s := range ports {
		if p, err := api.ParsePort(s); err != nil || p.Unix != relay {
			out = append(out, s)
		}
	}
	return out
}

// ErrNotCheckpointable means a sandbox holds what gVisor cannot save.
var ErrNotCheckpointable = errors.New("cannot be checkpointed")

// checkpointable refuses, before anything is paused, a sandbox whose
// gvx-sentry flags say it holds host state gVisor cannot save.
func checkpointable(flags string) error {
	for _, f := range strings.Fields(flags) {
		switch {
		case f == "--network=host":
			return fmt.Errorf("%w: it uses the host's network stack (network = \"host\"), whose sockets live in the host kernel", ErrNotCheckpointable)
		case strings.HasPrefix(f, "--host-uds=") && f != "--host-uds=none":
			return fmt.Errorf("%w: it publishes a host unix socket (a unix: port, or docker mode's dockerd socket on network \"none\", in a pool or a pod), which gVisor cannot save", ErrNotCheckpointable)
		}
	}
	return nil
}

// poolSandbox returns the sandbox container id runs in when that is one
// booted before it — a warm pool's, or one a restore of such a container
// booted (its sentry root links to the sandbox's) — and nil when id runs
// in a sandbox of its own. It refuses the sandboxes a restore could not
// boot again.
func (e *Engine) poolSandbox(ns, id string) (*sandbox.Sandbox, error) {
	target, err := os.Readlink(filepath.Join(e.layout.SentryRoot(id), ns))
	if err != nil {
		return nil, nil // a directory: its own sandbox's root
	}
	if _, err := os.Stat(api.SentryRoot(target).TaskRecord(id)); err == nil {
		return nil, fmt.Errorf("%w: it runs as a process in the root container of an image pool's sandbox, which gVisor's restore cannot put back; run it as a container (a pool without an image: the SDK's PoolConfig.Checkpointable, gvx serve's checkpointable templates), or in a sandbox of its own", ErrNotCheckpointable)
	}
	sb, err := sandbox.Load(api.SandboxDir(filepath.Dir(target)).Record())
	if err != nil {
		return nil, fmt.Errorf("its sandbox: %w", err)
	}
	if sb.Pool != nil && sb.Pool.Image != "" {
		return nil, fmt.Errorf("%w: it runs in an image pool's sandbox, whose root container runs on the pool's image, which a restore could not boot again; use a pool without an image, or no pool", ErrNotCheckpointable)
	}
	return sb, nil
}

// save saves paused backing id (control connection ctl, flags and spec as
// it runs with; pooled, the sandbox it runs in when not its own) into h's
// image directory: gVisor's state — which flushes what gVisor caches of
// the volumes to them, the kernel staying paused by the caller's Pause —
// then the volumes, the manifest and the spec.
func (e *Engine) save(ctx context.Context, ctl *control.Client, h *Handle, id, flags string, spec *specs.Spec, pooled *sandbox.Sandbox) error {
	dir := e.store.ImageDir(h.ID)
	files, err := createImageFiles(dir)
	if err != nil {
		return err
	}
	defer closeAll(files)
	if err := ctl.Checkpoint(files[0], files[1], files[2], true); err != nil {
		return api.ExplainSave(err)
	}
	m := &checkpoint.Manifest{Task: id, Flags: flags, Docker: dockerMode(flags)}
	if m.Relay, err = e.relayOf(namespaceOf(ctx), id); err != nil {
		return err
	}
	if m.Relay != "" {
		if err := checkpoint.SaveRelay(dir, e.layout.Relay(m.Relay)); err != nil {
			return err
		}
	}
	cgroup := spec.Linux.CgroupsPath
	if pooled != nil {
		if m.Root, err = checkpoint.SaveRoot(dir, pooled.Bundle(), pooled.ID, pooled.Flags); err != nil {
			return err
		}
		cgroup = pooled.Cgroup
	}
	if vols := volumesOf(ctx, spec.Mounts); len(vols) > 0 {
		saved, err := checkpoint.SaveVolumes(ctx, dir, vols, cgroups.Procs(cgroup))
		if err != nil {
			return err
		}
		m.Volumes = saved
	}
	if err := m.Write(dir); err != nil {
		return err
	}
	saved := *spec
	saved.Annotations = maps.Clone(spec.Annotations)
	stripRestoreDirectives(&saved)
	return writeSpec(filepath.Join(e.store.handleDir(h.ID), specFile), &saved)
}

// relayOf is the digest of the gvx-relay copy docker-mode backing id's
// guest runs — the shim records it in the task's directory
// (api.RelayDigestFile) — or "" when it runs none. The checkpoint keeps
// that copy, and a restore mounts it whatever the host's gvx-relay has
// become (shim/relaybin.go).
func (e *Engine) relayOf(ns, id string) (string, error) {
	path := filepath.Join(e.layout.TaskDir(ns, id), api.RelayDigestFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("its gvx-relay: %w", err)
	}
	if sum := string(data); digest.Valid(sum) {
		return sum, nil
	}
	return "", fmt.Errorf("its gvx-relay: %s holds %q, not a sha256", path, data)
}

// createImageFiles creates gVisor's image files in dir: state, pages
// metadata, pages.
func createImageFiles(dir string) ([]*os.File, error) {
	var files []*os.File
	for _, name := range []string{api.CheckpointStateFile, api.CheckpointPagesMetaFile, api.CheckpointPagesFile} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// volumesOf lists the ext4lite volumes among a container spec's mounts.
func volumesOf(ctx context.Context, mounts []specsMount) []checkpoint.Mounted {
	var out []checkpoint.Mounted
	for _, m := range mounts {
		isVol, ro, err := oci.VolumeMount(ctx, m)
		if err == nil && isVol {
			out = append(out, checkpoint.Mounted{Image: m.Source, Destination: m.Destination, ReadOnly: ro})
		}
	}
	return out
}
