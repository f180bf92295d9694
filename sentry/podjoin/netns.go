package podjoin

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/podnet"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// AttachNetns gives the running sandbox of cont (any of its containers)
// the interfaces of the pod's network namespace ns (podnet.Attach).
func AttachNetns(cont *container.Container, ns string) error {
	conn, err := sandboxctl.Connect(cont)
	if err != nil {
		return err
	}
	defer conn.Close()
	names, err := podnet.Attach(conn, ns)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	log.Infof("sandbox %s has %v of the pod's network namespace %s", cont.Sandbox.ID, names, ns)
	return nil
}
