package shim

import (
	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"fmt"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

// configFromOptions reads the gvx config a runtime handler points at: CRI
// and `ctr --runtime-config-path` pass runtimeoptions.Options.
func configFromOptions(any typeurlAny) (config.Config, error) {
	if any == nil || any.GetValue() == nil && any.GetTypeUrl() == "" {
		return config.Load("")
	}
	v, err := typeurl.UnmarshalAny(any)
	if err != nil {
		return config.Config{}, fmt.Errorf("unknown runtime options %s: gvx takes runtimeoptions (ConfigPath) only: %w", any.GetTypeUrl(), err)
	}
	switch o := v.(type) {
	case *runtimeoptions.Options:
		if len(o.ConfigBody) > 0 {
			c, err := config.Parse(o.ConfigBody)
			if err != nil {
				return config.Config{}, fmt.Errorf("gvx config (ConfigBody): %w", err)
			}
			return c, nil
		}
		return config.Load(o.ConfigPath)
	case *options.Options:
		if o.BinaryName != "" || o.Root != "" {
			return config.Config{}, fmt.Errorf("runc options (BinaryName %q, Root %q) do not apply to gvx: set `sentry`/`state_dir` in the gvx config instead", o.BinaryName, o.Root)
		}
		return config.Load("")
	default:
		return config.Config{}, fmt.Errorf("unknown runtime options type %T: gvx takes runtimeoptions with ConfigPath", v)
	}
}

type typeurlAny interface {
	GetTypeUrl() string
	GetValue() []byte
}

// dockerMode decides whether the task runs in docker mode: the task's
// annotation wins over the runtime handler's config.
func dockerMode(cfg config.Config, spec *specs.Spec) (bool, error) {
	req, set, err := oci.DockerRequested(spec)
	if err != nil || set {
		return req, err
	}
	return cfg.Docker.Enabled, nil
}
