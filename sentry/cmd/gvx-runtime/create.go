package main

import (
	"os"
	"os/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/volmount"
)

// create handles `create --bundle B --pid-file P <id>` of a task started
// as a process in a running sandbox, and of a container in a running
// sandbox (a pod's container, a warm-pool task): gvx-sentry's create of
// such a container goes on as its monitor (monitor.SpawnCreate), one
// start of gvx-sentry where there were two, or three with volumes or host
// binds (volmount.InNewNamespace).
func (c command) create() (bool, error) {
	flags, ids, ok := subArgs(c.args, map[string]string{"--bundle": "bundle", "--b": "bundle", "--pid-file": "pid-file", "--console-socket": "console-socket"},
		map[string]string{"--no-pivot": "", "--no-new-keyring": ""})
	if !ok || len(ids) != 1 || flags["pid-file"] == "" {
		return false, nil // preserved fds, …
	}
	id, dir, pidFile := ids[0], bundle.Dir(flags["bundle"]), flags["pid-file"]
	spec, err := bundle.ReadSpec(dir)
	if err != nil || spec.Process == nil {
		return false, nil // gvx-sentry says why
	}
	if !record.IsTask(spec) {
		if !inRunningSandbox(spec) {
			return false, nil
		}
		m := exec.Command(c.sentry)
		m.Args = os.Args // gvx-sentry's create, as the exec below would run it
		if !spec.Process.Terminal {
			// The container's stdio, which the monitor keeps. With a
			// terminal the caller (go-runc) reads create's output until
			// EOF: the monitor must not hold it.
			m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
		}
		// Its volumes and host binds are mounted in a mount namespace
		// of its own: started in one, gvx-sentry need not re-execute
		// itself into one (an error here is gvx-sentry's to report).
		if need, err := volmount.Needed(spec); err == nil && need {
			volmount.InNewNamespace(m)
		}
		return true, monitor.SpawnCreate(m, c.root, id)
	}
	if flags["console-socket"] != "" || spec.Process.Terminal {
		return false, nil
	}
	m := exec.Command(c.sentry, append(append([]string(nil), c.globals[1:]...), record.MonitorCommand, id)...)
	m.Args[0] = c.globals[0]
	m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	return true, record.Create(c.root, id, dir, spec, m, pidFile)
}

// inRunningSandbox reports whether spec is a container's that joins a
// running sandbox (gVisor's specutils.IsRootContainer is false: the CRI
// container type says "container").
func inRunningSandbox(spec *specs.Spec) bool {
	return criContainerType(spec) == api.CRIRoleContainer
}

// criContainerType is the container type the CRI gave spec, containerd's
// annotation or CRI-O's, as gVisor's specutils.SpecContainerType reads
// them ("sandbox" for a pod's own container, "container", or "").
func criContainerType(spec *specs.Spec) string {
	if t, ok := spec.Annotations[api.CRIContainerType]; ok {
		return t
	}
	return spec.Annotations["io.kubernetes.cri-o.ContainerType"]
}
