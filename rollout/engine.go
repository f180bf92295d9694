package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
)

// Options configure an Engine.
type Options struct {
	// StoreDir holds checkpoints and the volumes of restored sandboxes;
	// put it on the volumes' filesystem (XFS or btrfs) for reflink copies.
	StoreDir string
	// StateDir is gvx's state_dir ("": the default).
	StateDir string
	// Runtime and RuntimeOptions are what backings restored from handles
	// that do not record their sandbox's runtime run with
	// (default: gvx's runtime, no options).
	Runtime        string
	RuntimeOptions any
	// Spares is how many restored, paused backings the engine keeps ready
	// for each handle (0: a rollback restores then).
	Spares int
	// FIFODir is where restored backings' stdio FIFOs are made (""
	// containerd's default).
	FIFODir string
	// ForkLabel says which of a checkpointed container's labels a fork's
	// backing inherits (nil: all but the engine's own).
	ForkLabel func(key string) bool
	// LazyLabels: Rollback returns once the new backing runs, before
	// containerd has committed its labels as the sandbox's (a metadata
	// transaction with an fsync: ≈ 2 ms, 10 ms and more on a busy disk);
	// the next call on the sandbox waits for them. Until they are
	// committed another process finds the sandbox as it was before the
	// rollback, paused — and so does one that attaches after this one
	// died in that window. Default: Rollback waits.
	LazyLabels bool
	// NoDedupe: a checkpoint's memory is not deduplicated against its
	// parent's. By default, once a checkpoint with a parent is saved,
	// the engine makes its pages share storage with the parent's where
	// they are equal (checkpoint.Dedupe, in the background: ≈ the CPU
	// of reading both files), so that on a store on XFS or btrfs a
	// checkpoint costs on disk what the sandbox wrote since its parent.
	NoDedupe bool
	// NoTargets: no restore targets. By default, once a sandbox has a
	// checkpoint, the engine keeps one restore target for its lineage —
	// a sandbox booted from its spec, not started (target.go) — which a
	// rollback or fork without a ready spare restores into instead of
	// booting a sandbox then. It costs an idle sandbox's memory per
	// lineage; sandboxes with volumes or docker mode have none.
	NoTargets bool
	// Targets is how many restore targets the engine keeps per lineage
	// (0: one). More let a Fork of n restore its forks side by side
	// into booted sandboxes; each costs an idle sandbox.
	Targets int
}

// Engine checkpoints, rolls back and forks sandboxes.
type Engine struct {
	c      *client.Client
	store  *Store
	layout api.Layout
	opts   Options
	seq    atomic.Int64

	mu      sync.Mutex
	spares  map[string][]*backing    // ready spares by handle id
	filling map[string]int           // spares being restored, by handle id
	dedupes map[string]chan struct{} // dedupes under way, by handle id: closed when done
	filled  *sync.Cond               // signalled as restores of spares and targets, and uses of handles, end (on mu)
	// using counts the rollbacks, forks and restores reading a handle's
	// image, by handle id; releasing, the handles whose Release waits
	// for them (use).
	using     map[string]int
	releasing map[string]bool
	saving    map[string]*pending // checkpoints being saved, by handle id
	// targets are the ready restore targets, by lineage; targeting the
	// lineages one is being made for; untargetable those that cannot
	// have one (target.go).
	targets      map[string][]*backing
	targeting    map[string]int
	untargetable map[string]bool
	// live counts the engine's sandboxes by lineage: a lineage's targets
	// go with its last sandbox.
	live   map[string]int
	bg     sync.WaitGroup // background restores and teardowns
	closed bool
}

// New returns an engine on containerd client c.
func New(c *client.Client, o Options) (*Engine, error) {
	st, err := OpenStore(o.StoreDir)
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = api.DefaultStateDir
	}
	if o.Runtime == "" {
		o.Runtime = api.RuntimeType
	}
	if o.Spares < 0 {
		return nil, fmt.Errorf("rollout: Spares %d: want 0 or more", o.Spares)
	}
	if o.Targets < 0 {
		return nil, fmt.Errorf("rollout: Targets %d: want 0 or more (NoTargets turns them off)", o.Targets)
	}
	if o.Targets == 0 {
		o.Targets = 1
	}
	e := &Engine{c: c, store: st, layout: api.Layout{Dir: o.StateDir}, opts: o, spares: map[string][]*backing{}, filling: map[string]int{}, dedupes: map[string]chan struct{}{}, saving: map[string]*pending{},
		targets: map[string][]*backing{}, targeting: map[string]int{}, untargetable: map[string]bool{}, live: map[string]int{},
		using: map[string]int{}, releasing: map[string]bool{}}
	e.filled = sync.NewCond(&e.mu)
	return e, nil
}

// pending is a checkpoint being saved.
type pending struct {
	done chan struct{}
	err  error
}

func (p *pending) finish(err error) {
	p.err = err
	close(p.done)
}

// pending registers handle id's save.
func (e *Engine) pending(id string) *pending {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := &pending{done: make(chan struct{})}
	e.saving[id] = p
	return p
}

// Wait waits until handle id is saved and says how that went (nil for a
// handle saved earlier, or by another engine).
func (e *Engine) Wait(ctx context.Context, id string) error {
	e.mu.Lock()
	p := e.saving[id]
	e.mu.Unlock()
	if p == nil {
		_, err := e.store.Get(id)
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	delete(e.saving, id)
	e.mu.Unlock()
	return p.err
}

// Store is the engine's checkpoint store.
func (e *Engine) Store() *Store { return e.store }

// Sandbox is a sandbox the engine keeps: a stable id with a backing
// container that rollbacks replace.
type Sandbox struct {
	// ID is the sandbox's id (its first backing's container id).
	ID string
	e  *Engine

	mu      sync.Mutex
	cur     *backing
	lineage string
	parent  string // the handle its state descends from
	stdout  io.Writer
	stderr  io.Writer
	// promoting is a rollback's labelling of the current backing, nil
	// when none is pending. Calls on the sandbox wait for it first.
	promoting *promotion
}

// A promotion labels a backing a rollback resumed as its sandbox's.
type promotion struct {
	done chan struct{} // closed when err is set
	err  error
}

// settle waits until a rollback's labelling of the current backing is done
// and returns its error (sb.mu held).
func (sb *Sandbox) settle() error {
	p := sb.promoting
	if p == nil {
		return nil
	}
	<-p.done
	sb.promoting = nil
	return p.err
}

// Container is the sandbox's current backing container.
func (sb *Sandbox) Container() client.Container {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.cur.container
}

// Task is the current backing container's task.
func (sb *Sandbox) Task() client.Task {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.cur.task
}

// Parent is the handle the sandbox's state descends from ("" if none).
func (sb *Sandbox) Parent() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.parent
}

// keep counts sb among the engine's sandboxes of its lineage.
func (e *Engine) keep(sb *Sandbox) *Sandbox {
	e.mu.Lock()
	e.live[sb.lineage]++
	e.mu.Unlock()
	return sb
}

// Lineage is the tree the sandbox's checkpoints belong to (Handle.Lineage).
func (sb *Sandbox) Lineage() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.lineage
}

// Attach sends the sandbox's output from now on (and what a restored
// backing held back) to stdout and stderr. A sandbox's output before a
// rollback or fork goes wherever its first task's IO went.
func (sb *Sandbox) Attach(stdout, stderr io.Writer) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.stdout, sb.stderr = stdout, stderr
	if sb.cur.out != nil {
		sb.cur.out.open(stdout, stderr)
	}
}

// Adopt hands the running task of containerd container id to the engine:
// the engine may checkpoint it, and destroys it when the sandbox is rolled
// back (its successor is a new container) or destroyed.
func (e *Engine) Adopt(ctx context.Context, id string) (*Sandbox, error) {
	ctr, err := e.c.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", id, err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", id, err)
	}
	// A restored backing stands for the sandbox its label names.
	sid := id
	if v := labels[LabelSandbox]; v != "" {
		sid = v
	}
	if labels[labelLineage] == "" {
		if _, err := ctr.SetLabels(ctx, map[string]string{labelLineage: sid}); err != nil {
			return nil, fmt.Errorf("adopt %s: %w", id, err)
		}
	}
	b := &backing{id: id, container: ctr, task: task, restored: labels[LabelRole] != "", volDir: labels[labelVolumes]}
	if err := e.resumeOrphaned(ctx, b); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", id, err)
	}
	sb := e.keep(&Sandbox{ID: sid, e: e, cur: b, lineage: lineageOf(sid, labels)})
	if h, err := e.store.Get(labels[labelParent]); err == nil && h.Lineage == sb.lineage {
		// Its tree goes on from there (a handle of this store's).
		sb.parent = h.ID
	}
	return sb, nil
}

// RemoveSuperseded destroys the backings sandbox sb had before its
// current one — containers the engine restored labelled as sb's
// (LabelSandbox), and container sb.ID itself when a restore replaced it —
// if the process that made the current one is gone. A rollback destroys
// the backing it replaces in the background once the new one's labels
// are committed: a process that died in between left it (paused, which
// the destroy undoes), and nothing else would remove it. A live engine
// destroys its own.
func (e *Engine) RemoveSuperseded(ctx context.Context, sb *Sandbox) error {
	sb.mu.Lock()
	cur := sb.cur
	sb.mu.Unlock()
	if cur == nil || cur.id == sb.ID {
		return nil
	}
	labels, err := cur.container.Labels(ctx)
	if err != nil {
		return fmt.Errorf("sandbox %s's earlier backings: %w", sb.ID, err)
	}
	if o := labels[LabelOwner]; o == "" || procfs.Running(o) {
		return nil
	}
	conts, err := e.c.Containers(ctx, fmt.Sprintf("labels.%q==%s", LabelSandbox, sb.ID))
	if err != nil {
		return fmt.Errorf("sandbox %s's earlier backings: %w", sb.ID, err)
	}
	if ct, err := e.c.LoadContainer(ctx, sb.ID); err == nil {
		conts = append(conts, ct)
	}
	var errs []error
	for _, ct := range conts {
		if ct.ID() == cur.id {
			continue
		}
		l, err := ct.Labels(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := found(ctx, ct, l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		log.G(ctx).Infof("gvx rollout: removing %s, a backing of sandbox %s that a rollback replaced before its process died", ct.ID(), sb.ID)
		errs = append(errs, e.destroy(ctx, b))
	}
	return errors.Join(errs...)
}

// FindBacking returns the container that is sandbox id's backing: the
// newest restored container labelled as id's (LabelSandbox), else
// container id itself; errdefs.ErrNotFound if neither exists.
func FindBacking(ctx context.Context, c *client.Client, id string) (client.Container, error) {
	conts, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%s", LabelSandbox, id))
	if err != nil {
		return nil, fmt.Errorf("find sandbox %s: %w", id, err)
	}
	var best client.Container
	var bestAt time.Time
	for _, ct := range conts {
		info, err := ct.Info(ctx, client.WithoutRefreshedMetadata)
		if err != nil || info.Labels[LabelRole] != "sandbox" {
			continue
		}
		if best == nil || info.CreatedAt.After(bestAt) {
			best, bestAt = ct, info.CreatedAt
		}
	}
	if best != nil {
		return best, nil
	}
	ct, err := c.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("find sandbox %s: %w", id, err)
	}
	return ct, nil
}

// Destroy ends the sandbox: its backing is killed and removed with its
// volumes. Its checkpoints stay in the store until released.
func (e *Engine) Destroy(ctx context.Context, sb *Sandbox) error {
	sb.mu.Lock()
	_ = sb.settle() // the labels go with the backing
	b := sb.cur
	sb.cur = nil
	sb.mu.Unlock()
	if b == nil {
		return nil
	}
	err := e.destroy(ctx, b)
	e.mu.Lock()
	e.live[sb.lineage]--
	last := e.live[sb.lineage] <= 0
	if last {
		delete(e.live, sb.lineage)
	}
	e.mu.Unlock()
	if last {
		err = errors.Join(err, e.dropTarget(ctx, sb.lineage))
	}
	if b.id != sb.ID {
		// A rollback moved the backing's docker socket to the sandbox's
		// path; its shim removed only its own path.
		sock := e.layout.DockerSocket(namespaceOf(ctx), sb.ID)
		if rerr := os.Remove(sock); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		_ = os.Remove(filepath.Dir(sock))
	}
	return err
}

// Release removes handle id from the store, with its spares; sandboxes
// restored from it are unaffected. Rollbacks, forks and spares already
// restoring from it finish first; later ones find it released
// (ErrUnknownHandle).
func (e *Engine) Release(ctx context.Context, id string) error {
	if _, err := e.store.Get(id); err != nil {
		return err
	}
	e.mu.Lock()
	e.releasing[id] = true
	for e.filling[id] > 0 || e.using[id] > 0 {
		e.filled.Wait()
	}
	spares := e.spares[id]
	delete(e.spares, id)
	e.mu.Unlock()
	var errs []error
	for _, b := range spares {
		errs = append(errs, e.destroy(ctx, b))
	}
	errs = append(errs, e.store.remove(id))
	e.mu.Lock()
	delete(e.releasing, id)
	e.mu.Unlock()
	return errors.Join(errs...)
}

// use returns handle id for a restore from its image (a rollback, fork or
// RestoreAs), and done, to call once the restore no longer reads it: a
// Release of the handle waits until then. A handle released, or being
// released, is ErrUnknownHandle.
func (e *Engine) use(id string) (h *Handle, done func(), _ error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.releasing[id] {
		return nil, nil, fmt.Errorf("checkpoint %s: %w (it is being released)", id, ErrUnknownHandle)
	}
	h, err := e.store.Get(id)
	if err != nil {
		return nil, nil, err
	}
	e.using[id]++
	return h, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.using[id]--; e.using[id] <= 0 {
			delete(e.using, id)
		}
		e.filled.Broadcast()
	}, nil
}

// Close waits for the engine's background work and destroys its spares.
// The sandboxes it keeps are the caller's to destroy.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.filled.Broadcast()
	e.mu.Unlock()
	e.bg.Wait()
	e.mu.Lock()
	all := e.spares
	e.spares = map[string][]*backing{}
	targets := e.targets
	e.targets = map[string][]*backing{}
	e.mu.Unlock()
	var errs []error
	for _, kept := range []map[string][]*backing{all, targets} {
		for _, list := range kept {
			for _, b := range list {
				errs = append(errs, e.destroy(ctx, b))
			}
		}
	}
	return errors.Join(errs...)
}

// background runs fn (a restore, a teardown) after the caller returns;
// Close waits for it.
func (e *Engine) background(ctx context.Context, what string, fn func(context.Context) error) {
	e.mu.Lock()
	closed := e.closed
	if !closed {
		e.bg.Add(1)
	}
	e.mu.Unlock()
	if closed {
		// Close has waited already: do it now.
		if err := fn(ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx rollout: %s", what)
		}
		return
	}
	ctx = namespaces.WithNamespace(context.Background(), namespaceOf(ctx))
	go func() {
		defer e.bg.Done()
		if err := fn(ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx rollout: %s", what)
		}
	}()
}

func namespaceOf(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}

// newID is a fresh container id derived from base.
func (e *Engine) newID(base string) string {
	return base + "-" + strconv.FormatInt(e.seq.Add(1), 36) + strconv.FormatInt(time.Now().UnixNano()%46656, 36)
}

// sandboxInfo is what the engine reads of gVisor's state file of a
// sandbox.
type sandboxInfo struct {
	ID                string `json:"id"`
	ControlSocketPath string `json:"controlSocketPath"`
	Pid               int    `json:"pid"`
}

// sandboxFile is what the engine reads of gVisor's state file of a
// sandbox's root container: its sandbox, and the annotations of the spec
// gvx-sentry ran it with (the shim's rewrite).
type sandboxFile struct {
	Sandbox sandboxInfo `json:"sandbox"`
	Spec    struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"spec"`
}

// readState reads gVisor's state file of the root container of container
// id's sandbox: id's own, or, for a container in a sandbox booted before
// it (a warm pool's), its sandbox's root container's.
func (e *Engine) readState(ns, id string) (sandboxFile, error) {
	root := api.SentryRoot(filepath.Join(e.layout.SentryRoot(id), ns))
	var st sandboxFile
	path := root.SandboxState(id)
	if _, err := os.Stat(path); err != nil {
		if m, _ := filepath.Glob(root.ContainerStates(id)); len(m) == 1 {
			path = m[0]
		}
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err == nil && st.Sandbox.ID != "" && st.Sandbox.ID != id {
		// A container in another's sandbox: the root's file says how
		// the sandbox runs (its NAT).
		data, err = os.ReadFile(root.SandboxState(st.Sandbox.ID))
		if err == nil {
			st = sandboxFile{}
			err = json.Unmarshal(data, &st)
		}
	}
	if err != nil {
		return st, fmt.Errorf("sandbox state of %s: %w", id, err)
	}
	return st, nil
}

// sandboxState reads gVisor's state file of container id's sandbox.
func (e *Engine) sandboxState(ns, id string) (sandboxInfo, error) {
	st, err := e.readState(ns, id)
	return st.Sandbox, err
}

// nat reports the NAT sandbox id runs on (network = "nat": the NAT
// settings the shim merged into its spec), and whether it has one.
func (st sandboxFile) nat(id string) (api.NAT, bool, error) {
	v, ok := st.Spec.Annotations[api.AnnotationNAT]
	if !ok {
		return api.NAT{}, false, nil
	}
	n, err := api.DecodeNAT(v)
	if err != nil {
		return api.NAT{}, true, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return n, true, nil
}

// controlSocket reads where container id's sandbox serves its control
// RPCs from gVisor's state file of it.
func (e *Engine) controlSocket(ns, id string) (string, error) {
	st, err := e.sandboxState(ns, id)
	if err != nil {
		return "", err
	}
	if st.ControlSocketPath == "" {
		return "", fmt.Errorf("sandbox state of %s: no control socket", id)
	}
	return st.ControlSocketPath, nil
}

// RemoveRestored removes container id, one the engine restored (a
// rollback's, a fork's or a spare, of this engine or of an earlier
// process: LabelRole), with its volumes; nil if it is not there.
func (e *Engine) RemoveRestored(ctx context.Context, id string) error {
	ctr, err := e.c.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	if labels[LabelRole] == "" {
		return fmt.Errorf("remove %s: not a container the rollout engine restored (no %s label)", id, LabelRole)
	}
	// Perhaps paused through its control socket (a spare): destroy
	// resumes it first if the pause is marked (api.SentryRoot.EnginePaused),
	// so that its tasks can die.
	b, err := found(ctx, ctr, labels)
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return e.destroy(ctx, b)
}

// found is the backing that container ct, with labels, is to a process
// that did not make it: its task, if it has one.
func found(ctx context.Context, ct client.Container, labels map[string]string) (*backing, error) {
	b := &backing{id: ct.ID(), container: ct, restored: labels[LabelRole] != "", volDir: labels[labelVolumes]}
	if t, err := ct.Task(ctx, nil); err == nil {
		b.task = t
	} else if !errdefs.IsNotFound(err) {
		return nil, err
	}
	return b, nil
}
