package shim

import (
	"github.com/containerd/containerd/api/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

type (
	typesMount = types.Mount
	specMount  = specs.Mount
)
