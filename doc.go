// Package gvx is gvx's Go SDK: gVisor sandboxes through containerd.
//
// A Sandbox is one unprivileged gVisor sandbox run by containerd's gvx
// runtime (containerd-shim-gvx-v2): its init process, the commands Exec
// runs beside it, its files, and everything it holds on the host, which
// Close releases.
//
//	sb, err := gvx.New(ctx, gvx.Config{
//		Image:  "/srv/images/dind.tar", // or a containerd image reference
//		Docker: true,
//		Mounts: []gvx.Mount{{Type: gvx.MountVolume, Source: "/srv/golden.ext4", Target: "/var/lib/docker", Clone: true}},
//		Resources: gvx.Resources{MemoryBytes: 4 << 30, CPUMillis: 2000},
//	})
//	if err != nil { ... }
//	defer sb.Close(ctx)
//	res, err := sb.Exec(ctx, []string{"docker", "run", "--rm", "app:latest", "pytest"}, gvx.ExecOptions{Timeout: 10 * time.Minute})
//
// A Client is a connection to containerd; New uses a shared one. Without
// a containerd address the client runs an embedded containerd of its own
// (the gvx CLI's hidden `gvx containerd`, under Options.StateDir and
// DataDir), so a program needs nothing configured on the host beyond
// gvx's installed binaries and root. A Pool keeps sandboxes of one
// template booted ahead of demand (on `gvx pool serve`).
//
// Everything is safe for concurrent use. Errors are *Error values with a
// kind (ErrNotFound, ErrTimeout, …) for errors.Is. See docs/sdk.md.
package gvx
