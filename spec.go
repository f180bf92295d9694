package gvx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// ValidID reports whether id can name a sandbox: letters and digits,
// with single dots, dashes or underscores between them (containerd's
// identifiers), at most 64 characters. Ids of lower-case letters and
// digits only ([a-z0-9]+, what New generates) work everywhere, E2B's
// protocol included.
func ValidID(id string) bool { return len(id) <= 64 && idPattern.MatchString(id) }

// validate checks a Config before anything is made, naming the field and
// the fix.
func validate(cfg Config) error {
	if !ValidID(cfg.ID) {
		return fmt.Errorf("ID %q: use up to 64 letters and digits, with single . - or _ between them (best: [a-z0-9]+)", cfg.ID)
	}
	if cfg.Image == "" {
		return errors.New("Image is empty: give a containerd image reference or the path of an image archive")
	}
	switch cfg.Network {
	case "", NetworkNone:
		if cfg.NAT != nil {
			return fmt.Errorf("NAT is set but Network is %q: set Network to %q", cfg.Network, NetworkNAT)
		}
	case NetworkNAT:
		if cfg.NAT != nil {
			if err := cfg.NAT.api().Check(); err != nil {
				return fmt.Errorf("NAT: %w", err)
			}
		}
	default:
		return fmt.Errorf("Network %q: %w: want %q (loopback) or %q", cfg.Network, ErrUnsupported, NetworkNone, NetworkNAT)
	}
	for _, kv := range cfg.Env {
		if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
			return fmt.Errorf("Env %q: want KEY=VALUE", kv)
		}
	}
	for i, m := range cfg.Mounts {
		if err := validateMount(m); err != nil {
			return fmt.Errorf("Mounts[%d]: %w", i, err)
		}
	}
	for i, p := range cfg.Publish {
		if !filepath.IsAbs(p.HostPath) || !path.IsAbs(p.GuestPath) {
			return fmt.Errorf("Publish[%d]: HostPath %q and GuestPath %q must be absolute", i, p.HostPath, p.GuestPath)
		}
		if d := path.Dir(path.Clean(p.GuestPath)); d == "/" {
			return fmt.Errorf("Publish[%d]: GuestPath %q: put the socket in a directory of its own (e.g. /run/app/app.sock): that directory becomes a host directory", i, p.GuestPath)
		}
	}
	r := cfg.Resources
	if r.MemoryBytes < 0 || r.CPUMillis < 0 || r.Pids < 0 || r.DiskBytes < 0 {
		return errors.New("Resources: values must not be negative")
	}
	if r.MemoryBytes > 0 && r.MemoryBytes < 32<<20 {
		return fmt.Errorf("Resources.MemoryBytes %d: give at least 32 MiB (gVisor itself needs some)", r.MemoryBytes)
	}
	if r.CPUMillis > 0 && r.CPUMillis < 10 {
		return fmt.Errorf("Resources.CPUMillis %d: give at least 10 (a hundredth of a core)", r.CPUMillis)
	}
	if r.Pids > 0 && r.Pids < 32 {
		return fmt.Errorf("Resources.Pids %d: give at least 32 (gVisor's own threads count)", r.Pids)
	}
	for k := range cfg.Labels {
		if strings.HasPrefix(k, "dev.gvx.") {
			return fmt.Errorf("Labels: %q: keys starting with dev.gvx. are gvx's own", k)
		}
	}
	if cfg.Timeout < 0 || cfg.StopGrace < 0 {
		return errors.New("Timeout and StopGrace must not be negative")
	}
	return nil
}

func validateMount(m Mount) error {
	if !path.IsAbs(m.Target) {
		return fmt.Errorf("Target %q must be an absolute path", m.Target)
	}
	if m.Source == "" {
		return errors.New("Source is empty")
	}
	switch m.Type {
	case MountVolume:
		if st, err := os.Stat(m.Source); err == nil && st.Mode().IsRegular() {
			return nil
		}
		return fmt.Errorf("volume %s: not an ext4 image file: make one with `gvx volume create --size 4G %s`", m.Source, m.Source)
	case MountBind:
		if m.Clone {
			return errors.New("Clone applies to volumes only")
		}
		return nil
	}
	return fmt.Errorf("Type %q: want %q or %q", m.Type, MountVolume, MountBind)
}

// specOpts is the sandbox's OCI spec: the image's config with cfg's
// overrides.
func specOpts(cfg Config, img client.Image, mounts []specs.Mount) []oci.SpecOpts {
	opts := []oci.SpecOpts{oci.WithImageConfigArgs(img, cfg.Cmd)}
	if len(cfg.Entrypoint) > 0 {
		opts = append(opts, oci.WithProcessArgs(append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)...))
	}
	if len(cfg.Env) > 0 {
		opts = append(opts, oci.WithEnv(cfg.Env))
	}
	if cfg.Workdir != "" {
		opts = append(opts, oci.WithProcessCwd(cfg.Workdir))
	}
	if cfg.User != "" {
		opts = append(opts, oci.WithUser(cfg.User), oci.WithAdditionalGIDs(cfg.User))
	}
	if cfg.TTY {
		opts = append(opts, oci.WithTTY)
	}
	if cfg.Hostname != "" {
		opts = append(opts, oci.WithHostname(cfg.Hostname))
	}
	if len(mounts) > 0 {
		opts = append(opts, oci.WithMounts(mounts))
	}
	r := cfg.Resources
	if r.MemoryBytes > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(r.MemoryBytes)))
	}
	if r.CPUMillis > 0 {
		opts = append(opts, oci.WithCPUCFS(r.CPUMillis*100, 100000))
	}
	if r.Pids > 0 {
		opts = append(opts, oci.WithPidsLimit(r.Pids))
	}
	if r.DiskBytes > 0 {
		opts = append(opts, oci.WithAnnotations(map[string]string{api.AnnotationRootfsSize: strconv.FormatInt(r.DiskBytes, 10)}))
	}
	if cfg.Docker {
		opts = append(opts, oci.WithAnnotations(map[string]string{api.AnnotationDocker: "true"}))
	}
	if cfg.Network == NetworkNAT {
		ann := map[string]string{api.AnnotationNetwork: api.NetworkNAT}
		if cfg.NAT != nil {
			// validate checked it; encoding a NAT cannot fail.
			ann[api.AnnotationNAT], _ = api.EncodeNAT(cfg.NAT.api())
		}
		opts = append(opts, oci.WithAnnotations(ann))
	}
	return opts
}

// labels are the container's: the user's and gvx's own.
func (s *Sandbox) labels(pool string) (map[string]string, error) {
	l := map[string]string{LabelSandbox: "1", LabelImage: s.cfg.Image}
	for k, v := range s.cfg.Labels {
		l[k] = v
	}
	if s.cfg.Docker {
		l[LabelDocker] = "true"
	}
	if s.cfg.Timeout > 0 {
		l[api.AnnotationMaxLifetime] = (s.cfg.Timeout + s.cfg.StopGrace).String()
	}
	if pool != "" {
		l[LabelPool] = pool
	}
	if len(s.owned.Volumes)+len(s.owned.Files) > 0 {
		b, err := json.Marshal(s.owned)
		if err != nil {
			return nil, err
		}
		l[LabelOwned] = string(b)
	}
	return l, nil
}

// sandboxFlags are the gvx-sentry flags cfg needs beyond the config's.
func sandboxFlags(base config.Config, cfg Config) []string {
	var flags []string
	if len(cfg.Publish) > 0 {
		flags = append(flags, "--host-uds=create")
	}
	return flags
}

// runtimeOptions carry the gvx config to the sandbox's shim: the client's
// config file, or, when cfg needs more flags, the config itself.
func (c *Client) runtimeOptions(cfg Config) (any, error) {
	extra := sandboxFlags(c.cfg, cfg)
	if len(extra) == 0 {
		if c.opts.RuntimeConfig != "" {
			return &runtimeoptions.Options{ConfigPath: c.opts.RuntimeConfig}, nil
		}
		return nil, nil
	}
	rc := c.cfg
	rc.SentryFlags = append(slices.Clone(rc.SentryFlags), extra...)
	body, err := encodeConfig(rc)
	if err != nil {
		return nil, err
	}
	return &runtimeoptions.Options{ConfigBody: body}, nil
}

// encodeConfig writes a gvx config as TOML, checked by parsing it back.
func encodeConfig(cfg config.Config) ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return nil, fmt.Errorf("encode gvx config: %w", err)
	}
	if _, err := config.Parse(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("gvx config for the sandbox: %w", err)
	}
	return buf.Bytes(), nil
}
