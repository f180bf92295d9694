package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Volume is one ext4 image gvx-sentry mounts at Staging (a host path the
// spec bind-mounts into the sandbox) before the sandbox is created.
type Volume struct {
	Image string `json:"image"`
	// Open, if set, is the path gvx-sentry opens instead of Image: the
	// shim's leased, checked descriptor (/proc/PID/fd/N), so that the file
	// mounted is the file checked even if Image is renamed meanwhile.
	Open     string `json:"open,omitempty"`
	Staging  string `json:"staging"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Destination is the volume's path in the container. Set for the
	// volumes of a restore target (SentryRoot.RestoreTargetVolumes),
	// which gvx-sentry mounts there inside the booted sandbox's gofer
	// rather than at Staging before the sandbox is created.
	Destination string `json:"destination,omitempty"`
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
		if !filepath.IsAbs(vol.Image) || !filepath.IsAbs(vol.Staging) || vol.Open != "" && !filepath.IsAbs(vol.Open) {
			return nil, fmt.Errorf("annotation %s: image %q, open %q and staging %q must be absolute", AnnotationVolumes, vol.Image, vol.Open, vol.Staging)
		}
	}
	return vols, nil
}

// ReadVolumes reads a list of volumes written as JSON (WriteJSON) at path,
// each with an absolute image, open path and destination; none if there
// is no such file.
func ReadVolumes(path string) ([]Volume, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	var vols []Volume
	if err := json.Unmarshal(data, &vols); err != nil {
		return nil, fmt.Errorf("volumes %s: %w", path, err)
	}
	for _, vol := range vols {
		if !filepath.IsAbs(vol.Image) || !filepath.IsAbs(vol.Destination) || vol.Open != "" && !filepath.IsAbs(vol.Open) {
			return nil, fmt.Errorf("volumes %s: image %q, open %q and destination %q must be absolute", path, vol.Image, vol.Open, vol.Destination)
		}
	}
	return vols, nil
}
