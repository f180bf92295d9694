package compat

import (
	"encoding/json"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"

	"github.com/gvxrun/gvx/api"
)

// taskCreators are the system calls that make a task (a process or a
// thread).
var taskCreators = map[string]bool{"clone": true, "clone3": true, "fork": true, "vfork": true}

// InstallPidsLimit makes every system call that creates a task fail with
// EAGAIN while the sandbox has limit tasks (threads, as Linux's pids
// controller counts them) or more — what a guest sees at its cgroup's
// pids.max on Linux. gVisor leaves the spec's pids limit to the host
// cgroup, where a guest reaching it crashes the whole Sentry (whose own
// threads it counts too); the shim therefore gives the host cgroup a
// larger backstop (api.HostPidsLimit) and the guest this limit. Concurrent
// clones may overshoot it by the number of clones in flight. Call it
// before any guest task runs; limit ≤ 0 does nothing.
func InstallPidsLimit(limit int64) {
	if limit <= 0 {
		return
	}
	for _, table := range kernel.SyscallTables() {
		changed := false
		for num, sc := range table.Table {
			if !taskCreators[sc.Name] || sc.Fn == nil || pidsPatched[table][num] {
				continue
			}
			sc.Fn = limitTasks(sc.Fn, limit)
			table.Table[num] = sc
			if pidsPatched[table] == nil {
				pidsPatched[table] = map[uintptr]bool{}
			}
			pidsPatched[table][num] = true
			changed = true
		}
		if changed {
			table.Init()
		}
	}
	log.Infof("gvx: the guest may have at most %d tasks", limit)
}

var pidsPatched = map[*kernel.SyscallTable]map[uintptr]bool{}

func limitTasks(fn kernel.SyscallFn, limit int64) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		if int64(t.Kernel().RootPIDNamespace().NumTasks()) >= limit {
			return 0, nil, linuxerr.EAGAIN
		}
		return fn(t, sysno, args)
	}
}

// BootPidsLimit is the guest's pids limit (api.AnnotationPidsLimit) in
// the spec of a boot command line (args: gVisor's `boot`, whose spec is
// at --spec-fd; read in place, not moving the file's offset); 0 if none.
func BootPidsLimit(args []string) int64 {
	fd := -1
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--spec-fd=")
		if !ok && (a == "--spec-fd" || a == "-spec-fd") && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				fd = n
			}
		}
	}
	if fd < 0 {
		return 0
	}
	var body []byte
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		n, err := unix.Pread(fd, buf, off)
		if n > 0 {
			body = append(body, buf[:n]...)
			off += int64(n)
		}
		if err != nil || n == 0 {
			break
		}
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(body, &spec); err != nil {
		return 0
	}
	n, err := strconv.ParseInt(spec.Annotations[api.AnnotationPidsLimit], 10, 64)
	if err != nil {
		return 0
	}
	return n
}
