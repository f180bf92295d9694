// Package server is containerd's daemon linked into the gvx CLI.
//
// `gvx containerd` runs it: containerd v2's own command (the module the
// root already requires) with the plugins gvx's SDK and CLI use — content,
// metadata, images, leases, gc, the overlayfs and native snapshotters,
// the walking differ, runtime v2 tasks (for containerd-shim-gvx-v2),
// events, namespaces, introspection, transfer — and not CRI, NRI or the
// other snapshotters. Building it shares the shim's compiled containerd
// packages, so it costs far less than a `go install` of containerd.
package server

import (
	"context"

	"github.com/containerd/containerd/v2/cmd/containerd/command"

	// The plugins, as containerd's builtins register them.
	_ "github.com/containerd/containerd/v2/core/runtime/v2"
	_ "github.com/containerd/containerd/v2/plugins/content/local/plugin"
	_ "github.com/containerd/containerd/v2/plugins/diff/walking/plugin"
	_ "github.com/containerd/containerd/v2/plugins/events"
	_ "github.com/containerd/containerd/v2/plugins/gc"
	_ "github.com/containerd/containerd/v2/plugins/leases"
	_ "github.com/containerd/containerd/v2/plugins/metadata"
	_ "github.com/containerd/containerd/v2/plugins/mount"
	_ "github.com/containerd/containerd/v2/plugins/sandbox"
	_ "github.com/containerd/containerd/v2/plugins/server/grpc"
	_ "github.com/containerd/containerd/v2/plugins/server/ttrpc"
	_ "github.com/containerd/containerd/v2/plugins/services/containers"
	_ "github.com/containerd/containerd/v2/plugins/services/content"
	_ "github.com/containerd/containerd/v2/plugins/services/diff"
	_ "github.com/containerd/containerd/v2/plugins/services/events"
	_ "github.com/containerd/containerd/v2/plugins/services/healthcheck"
	_ "github.com/containerd/containerd/v2/plugins/services/images"
	_ "github.com/containerd/containerd/v2/plugins/services/introspection"
	_ "github.com/containerd/containerd/v2/plugins/services/leases"
	_ "github.com/containerd/containerd/v2/plugins/services/mounts"
	_ "github.com/containerd/containerd/v2/plugins/services/namespaces"
	_ "github.com/containerd/containerd/v2/plugins/services/sandbox"
	_ "github.com/containerd/containerd/v2/plugins/services/snapshots"
	_ "github.com/containerd/containerd/v2/plugins/services/streaming"
	_ "github.com/containerd/containerd/v2/plugins/services/tasks"
	_ "github.com/containerd/containerd/v2/plugins/services/transfer"
	_ "github.com/containerd/containerd/v2/plugins/services/version"
	_ "github.com/containerd/containerd/v2/plugins/services/warning"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/native/plugin"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/overlay/plugin"
	_ "github.com/containerd/containerd/v2/plugins/streaming"
	_ "github.com/containerd/containerd/v2/plugins/transfer"
)

// Main runs containerd with args (its own flags, e.g. --config FILE)
// until it is told to stop (SIGTERM, SIGINT).
func Main(ctx context.Context, args []string) error {
	return command.App().Run(ctx, append([]string{"containerd"}, args...))
}
