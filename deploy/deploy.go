// Package deploy holds gvx's Kubernetes manifests: the kustomize base
// (base/: the gvx RuntimeClass, the gvx-node installer DaemonSet and its
// ConfigMap), overlays/uninstall, and the agent-sandbox example
// (examples/agent-sandbox). The node installer itself is
// deploy/installer/install.sh. Files embeds them for tests, which read
// them as Kubernetes does (YAML to JSON).
package deploy

import (
	"embed"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Files are the manifests, by their path below deploy/.
//
//go:embed kustomization.yaml base overlays examples
var Files embed.FS

// RuntimeClassFile is the gvx RuntimeClass.
const RuntimeClassFile = "base/runtimeclass.yaml"

// RuntimeClassOverhead is the memory the gvx RuntimeClass declares per
// pod (overhead.podFixed.memory), in bytes.
func RuntimeClassOverhead() (int64, error) {
	data, err := Files.ReadFile(RuntimeClassFile)
	if err != nil {
		return 0, err
	}
	var rc struct {
		Overhead struct {
			PodFixed map[string]string `json:"podFixed"`
		} `json:"overhead"`
	}
	if err := yaml.Unmarshal(data, &rc); err != nil {
		return 0, fmt.Errorf("%s: %w", RuntimeClassFile, err)
	}
	q, ok := rc.Overhead.PodFixed["memory"]
	if !ok {
		return 0, fmt.Errorf("%s: no overhead.podFixed.memory", RuntimeClassFile)
	}
	v, err := resource.ParseQuantity(q)
	if err != nil {
		return 0, fmt.Errorf("%s: overhead.podFixed.memory %q: %w", RuntimeClassFile, q, err)
	}
	return v.Value(), nil
}
