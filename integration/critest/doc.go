// Package critest runs critest, the CRI conformance suite of cri-tools,
// against a private containerd that has gvx's runtime handler and runc's,
// and compares the two.
//
// Setup starts the registry (crane registry serve on 127.0.0.1), pushes
// the test images hack/mkimage-critest.sh builds locally under critest's
// own repository paths, and starts containerd (integration/harness) with
// a hosts.toml mirror that sends every registry to that loopback registry,
// a bridge CNI network with port mappings, and the pod sandbox image from
// the same registry. Env.Run runs critest with one runtime handler and
// reads its ginkgo JSON report; Markdown renders two reports side by side
// for docs/compatibility.md, and the floor file lists the specs gvx
// passes, which TestCritestFloor holds it to.
package critest
