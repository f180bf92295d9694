package api

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// Volume is one ext4 image gvx-sentry mounts at Staging (a host path the
// spec bind-mounts into the sandbox) before the sandbox is created.
type Volume struct {
	Image    string `json:"image"`
	Staging  string `json:"staging"`
	ReadOnly bool   `json:"readonly,omitempty"`
}

// EncodeVolumes is the AnnotationVolumes value for vols.
func EncodeVolumes(vols []Volume) (string, error) {
	data, err := json.Marshal(vols)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", AnnotationVolumes, err)
	}
	return string(data), nil
}

// DecodeVolumes parses an AnnotationVolumes value ("" is none).
func DecodeVolumes(v string) ([]Volume, error) {
	if v == "" {
		return nil, nil
	}
	var vols []Volume
	if err := json.Unmarshal([]byte(v), &vols); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationVolumes, err)
	}
	for _, vol := range vols {
		if !filepath.IsAbs(vol.Image) || !filepath.IsAbs(vol.Staging) {
			return nil, fmt.Errorf("annotation %s: image %q and staging %q must be absolute", AnnotationVolumes, vol.Image, vol.Staging)
		}
	}
	return vols, nil
}
