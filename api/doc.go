// Package api is the contract between gvx's two Go modules.
//
// The root module (the containerd shim, the gvx CLI, pools) and the sentry
// module (gvx-sentry, gvx-runtime, gvx-hook, gvx-pause: gVisor as a
// library) cannot link each other: gVisor and containerd pin incompatible
// runtime-spec versions. What one writes and the other reads — spec
// annotations and their JSON, binary names, the global-flags environment
// variable and file, hook arguments, exit statuses, the layout of gvx's
// state directory — is defined here, once, and nowhere else. The package
// depends on the standard library only.
//
// contracttest/contract.json spells the contract out as data; a test in each
// module checks that module's real encoders and decoders against it, so a
// change to either side alone fails a test.
package api
