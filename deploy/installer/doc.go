// Package installer holds gvx's node installer, install.sh (what the
// gvx-node DaemonSet of deploy/base runs), and its tests: install and
// uninstall against node trees under a temporary HOST_ROOT, the result
// read back with containerd's own config loader.
package installer
