// Package layered forwards to github.com/gvxrun/gvx/bench/snapshotter/layered.
//
// It is here only because integration/snapshotter_test.go still imports
// this path; once that import names bench/snapshotter/layered, delete this
// directory.
//
// Deprecated: use github.com/gvxrun/gvx/bench/snapshotter/layered.
package layered

import "github.com/gvxrun/gvx/bench/snapshotter/layered"

// Entry is layered.Entry.
type Entry = layered.Entry

// Layer is layered.Layer.
type Layer = layered.Layer

// AddLayers is layered.AddLayers.
func AddLayers(src, dst, ref string, layers ...Layer) error {
	return layered.AddLayers(src, dst, ref, layers...)
}
