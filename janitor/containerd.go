package janitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/rollout"
)

// reconcile is what the containerds know.
type reconcile struct {
	clients     map[string]*client.Client // reachable, by socket
	unreachable []string
	// known: namespace → container ids, over all containerds; ids: the
	// container ids of any namespace.
	known map[string]map[string]bool
	ids   map[string]bool
	// groups: namespace → the groups (gvx group label, CRI pod) of its
	// containers, each served by one shim named for it.
	groups map[string]map[string]bool
}

// addresses are the configured containerds and those of the running
// shims.
func (s *sweep) addresses() []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range s.o.Containerd {
		add(a)
	}
	for _, p := range s.procs {
		if p.isShimServer() {
			add(flag(p.args, "address"))
		}
	}
	sort.Strings(out)
	return out
}

// connect asks each containerd at addrs for its namespaces and containers.
func connect(ctx context.Context, addrs []string) *reconcile {
	r := &reconcile{clients: map[string]*client.Client{}, known: map[string]map[string]bool{}, ids: map[string]bool{}, groups: map[string]map[string]bool{}}
	for _, a := range addrs {
		if err := r.load(ctx, a); err != nil {
			r.unreachable = append(r.unreachable, fmt.Sprintf("%s (%v)", a, err))
		}
	}
	return r
}

func (r *reconcile) load(ctx context.Context, addr string) error {
	if _, err := os.Stat(addr); err != nil {
		return err
	}
	c, err := client.New(addr, client.WithTimeout(3*time.Second))
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nss, err := c.NamespaceService().List(cctx)
	if err != nil {
		c.Close()
		return err
	}
	for _, ns := range nss {
		cs, err := c.ContainerService().List(namespaces.WithNamespace(cctx, ns))
		if err != nil {
			c.Close()
			return fmt.Errorf("list containers of %s: %w", ns, err)
		}
		if r.known[ns] == nil {
			r.known[ns], r.groups[ns] = map[string]bool{}, map[string]bool{}
		}
		for _, ci := range cs {
			r.known[ns][ci.ID] = true
			r.ids[ci.ID] = true
			for _, g := range groupsOf(ci) {
				r.groups[ns][g] = true
			}
		}
	}
	r.clients[addr] = c
	return nil
}

// groupsOf are the shim groups a container may belong to.
func groupsOf(ci containers.Container) []string {
	out := []string{ci.Labels[api.GroupLabel]}
	if ci.Spec != nil {
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(ci.Spec.GetValue(), &spec) == nil {
			out = append(out, spec.Annotations[api.GroupLabel], spec.Annotations[api.CRISandboxID])
		}
	}
	return out
}

// complete: every containerd that may own gvx state answered.
func (r *reconcile) complete() bool { return len(r.unreachable) == 0 && len(r.clients) > 0 }

func (r *reconcile) close() {
	for _, c := range r.clients {
		c.Close()
	}
}

// lifetimes stops the gvx sandboxes past their maximum lifetime.
func (s *sweep) lifetimes(ctx context.Context) {
	for addr, c := range s.cd.clients {
		for ns := range s.cd.known {
			nctx := namespaces.WithNamespace(ctx, ns)
			cs, err := c.ContainerService().List(nctx)
			if err != nil {
				continue
			}
			for _, ci := range cs {
				if ci.Runtime.Name != api.RuntimeType {
					continue
				}
				life, err := lifetime(ci, s.o.MaxLifetime)
				if err != nil {
					s.add(KindSandbox, ns+"/"+ci.ID, "lifetime", func() (string, error) { return "", err })
					continue
				}
				age := s.now.Sub(ci.CreatedAt)
				if life <= 0 || age <= life {
					continue
				}
				ci := ci
				why := fmt.Sprintf("running %s, lifetime %s, containerd %s", age.Round(time.Second), life, addr)
				// Its shim exits and containerd cleans up after it: its
				// state is the next sweep's.
				s.stopped[ci.ID] = true
				s.add(KindSandbox, ns+"/"+ci.ID, why, func() (string, error) { return s.expire(nctx, c, ci) })
			}
		}
	}
}

// restored removes the containers a rollout engine restored — hot spares,
// restore targets — that are no sandbox's and whose engine's process is
// gone (rollout.Orphaned), with their volume copies: nothing else would
// (a `gvx serve` that restarts removes its own).
func (s *sweep) restored(ctx context.Context) {
	for addr, c := range s.cd.clients {
		for ns := range s.cd.known {
			nctx := namespaces.WithNamespace(ctx, ns)
			cs, err := c.ContainerService().List(nctx, fmt.Sprintf("labels.%q", rollout.LabelOwner))
			if err != nil {
				continue
			}
			for _, ci := range cs {
				if !rollout.Orphaned(ci.Labels) || !s.old(ci.CreatedAt) {
					continue
				}
				ci := ci
				why := fmt.Sprintf("a rollout %s whose engine's process %s is gone, containerd %s", ci.Labels[rollout.LabelRole], ci.Labels[rollout.LabelOwner], addr)
				s.stopped[ci.ID] = true
				s.add(KindRestored, ns+"/"+ci.ID, why, func() (string, error) {
					how, err := s.expire(nctx, c, ci)
					if err != nil {
						return how, err
					}
					if dir := rollout.RestoredVolumes(ci.Labels); dir != "" {
						if err := os.RemoveAll(dir); err != nil {
							return how, fmt.Errorf("its volume copies: %w", err)
						}
						how += ", volume copies removed"
					}
					return how, nil
				})
			}
		}
	}
}

// criKindLabel marks the containers containerd's CRI plugin made: the
// kubelet deletes those; the janitor only stops their task.
const criKindLabel = "io.cri-containerd.kind"

// lifetime is a container's maximum lifetime: its label, else its spec's
// annotation, else def.
func lifetime(ci containers.Container, def time.Duration) (time.Duration, error) {
	v := ci.Labels[api.AnnotationMaxLifetime]
	if v == "" && ci.Spec != nil {
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(ci.Spec.GetValue(), &spec) == nil {
			v = spec.Annotations[api.AnnotationMaxLifetime]
		}
	}
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q: want a duration such as \"2h\"", api.AnnotationMaxLifetime, v)
	}
	return d, nil
}

// expire stops a container's task (SIGTERM, SIGKILL after the grace
// period), deletes it, and deletes the container with its snapshot
// unless the kubelet owns it.
func (s *sweep) expire(ctx context.Context, c *client.Client, ci containers.Container) (string, error) {
	cont, err := c.LoadContainer(ctx, ci.ID)
	if err != nil {
		return "", err
	}
	how := "no task"
	task, err := cont.Task(ctx, nil)
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return "", fmt.Errorf("load task: %w", err)
	default:
		exit, err := task.Wait(ctx)
		if err != nil {
			return "", fmt.Errorf("wait for task: %w", err)
		}
		if st, err := task.Status(ctx); err == nil && st.Status == client.Paused {
			_ = task.Resume(ctx)
		}
		how = "SIGTERM"
		if err := task.Kill(ctx, syscall.SIGTERM, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
			return "", fmt.Errorf("SIGTERM: %w", err)
		}
		select {
		case <-exit:
		case <-time.After(s.o.Grace):
			how = "SIGKILL"
			if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
				return how, fmt.Errorf("SIGKILL: %w", err)
			}
			select {
			case <-exit:
			case <-time.After(10 * time.Second):
				return how, errors.New("the task did not exit 10s after SIGKILL")
			}
		}
		if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
			return how, fmt.Errorf("delete task: %w", err)
		}
	}
	if ci.Labels[criKindLabel] != "" {
		return how + ", task deleted (the kubelet removes the container)", nil
	}
	if err := cont.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return how, fmt.Errorf("delete container: %w", err)
	}
	return how + ", task and container deleted", nil
}

// leases deletes the image pools' leases whose pool is gone.
func (s *sweep) leases(ctx context.Context) {
	for addr, c := range s.cd.clients {
		for ns := range s.cd.known {
			nctx := namespaces.WithNamespace(ctx, ns)
			ls, err := c.LeasesService().List(nctx)
			if err != nil {
				s.skip("leases of %s in %s: %v", addr, ns, err)
				continue
			}
			for _, l := range ls {
				dir := l.Labels[api.LeaseLabel]
				if !strings.HasPrefix(dir, s.o.Layout.Pools()+"/") || !s.old(l.CreatedAt) || s.poolInUse(api.PoolDir(dir)) {
					continue
				}
				l := l
				s.add(KindLease, fmt.Sprintf("%s (namespace %s, containerd %s)", l.ID, ns, addr), "its pool "+dir+" has no server and no sandbox", func() (string, error) {
					if err := c.LeasesService().Delete(nctx, leases.Lease{ID: l.ID}, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
						return "", err
					}
					return "deleted", nil
				})
			}
		}
	}
}
