package shim

import (
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// mountOptions are the OCI mount options a gvx sandbox honours (gVisor's,
// less shared propagation, which a sandbox cannot have), plus "rro":
// gvx-sentry makes such a bind recursively read-only (sentry/hostbind).
// containerd's CRI asks for recursive read-only mounts only of a runtime
// whose features list "rro".
var mountOptions = []string{
	"acl", "async", "atime", "bind", "defaults", "dev", "diratime", "dirsync", "exec", "iversion",
	"loud", "mand", "noacl", "noatime", "nodev", "nodiratime", "noexec", "noiversion", "nomand",
	"norelatime", "nostrictatime", "nosuid", "private", "rbind", "relatime", "ro", "rprivate",
	"rro", "rslave", "runbindable", "rw", "silent", "slave", "strictatime", "suid", "sync", "unbindable",
}

// runtimeFeatures is the OCI runtime features document the shim's -info
// reports (containerd's runc shim reports `runc features`): only what gvx
// knows it supports. It claims no user-namespace or idmap support, so
// CRI does not hand gvx pods of its own user namespaces.
func runtimeFeatures() *features.Features {
	return &features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: "1.2.1", // gVisor's runtime-spec
		MountOptions:  mountOptions,
	}
}
