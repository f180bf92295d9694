#!/bin/sh
# gvx's node installer: what the gvx-node DaemonSet runs (deploy/base), and
# what an operator can run by hand on a node.
#
#   install.sh install     copy the binaries, write containerd's gvx fragment
#                          and /etc/gvx/config.toml, import the fragment from
#                          containerd's config, restart containerd; when the
#                          gvx config has a [pool] of size > 0, write the
#                          pool server's systemd unit and (re)start it
#   install.sh uninstall   stop the pool server, put back every file as it
#                          was before install (the ones it replaced byte for
#                          byte, from its backups), remove what it created,
#                          restart containerd
#   install.sh status      say what is installed
#   install.sh wait        sleep until SIGTERM (the DaemonSet's main container);
#                          UNINSTALL_ON_STOP=true makes SIGTERM uninstall first
#
# Both modes are idempotent. Every path below is the node's path; the script
# reads and writes it under HOST_ROOT (the node's root as the installer sees
# it). The installer keeps its manifest and backups in GVX_INSTALLER_STATE.
#
# Environment (defaults in brackets):
#   HOST_ROOT            the node's / as this script sees it [/host]
#   NODE_ROOT            the prefix under which the node's containerd sees
#                        HOST_ROOT: empty in a DaemonSet (it sees the node's
#                        /); HOST_ROOT itself when containerd runs in this
#                        script's mount namespace (the tests) []
#   GVX_SRC              directory holding the binaries to install [/gvx/bin]
#   GVX_BIN_DIR          where they go on the node [/opt/gvx/bin]
#   CONTAINERD_CONFIG    the config containerd reads [/etc/containerd/config.toml]
#   CONTAINERD_DROPIN    the fragment gvx adds [/etc/containerd/conf.d/gvx.toml]
#   GVX_CONFIG           gvx's config on the node [/etc/gvx/config.toml]
#   GVX_CONFIG_SRC       a file to install as GVX_CONFIG (a ConfigMap) [built in]
#   GVX_HANDLER          the CRI runtime handler name [gvx]
#   GVX_POD_ANNOTATIONS  pod annotations containerd passes to gvx (TOML array
#                        items) ["dev.gvx.docker", "dev.gvx.max-lifetime",
#                        "dev.gvx.memory-high", "dev.gvx.rootfs-size"]
#   GVX_INSTALLER_STATE  manifest and backups [/etc/gvx/installer]
#   RESTART              systemd | command | none [systemd]
#   RESTART_CMD          the command for RESTART=command (sh -c)
#   CONTAINERD_UNIT      the systemd unit for RESTART=systemd [containerd]
#   GVX_POOL_UNIT        the pool server's systemd unit, written when
#                        GVX_CONFIG has a [pool] of size > 0
#                        [/etc/systemd/system/gvx-pool.service]
#   SYSTEMCTL            how RESTART=systemd runs systemctl on the node
#                        [nsenter -t 1 -m -u -i -n -p -- systemctl]
#   FORCE                1: uninstall even while gvx shims run [0]
set -eu

HOST_ROOT=${HOST_ROOT:-/host}
NODE_ROOT=${NODE_ROOT:-}
GVX_SRC=${GVX_SRC:-/gvx/bin}
GVX_BIN_DIR=${GVX_BIN_DIR:-/opt/gvx/bin}
CONTAINERD_CONFIG=${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
CONTAINERD_DROPIN=${CONTAINERD_DROPIN:-/etc/containerd/conf.d/gvx.toml}
GVX_CONFIG=${GVX_CONFIG:-/etc/gvx/config.toml}
GVX_CONFIG_SRC=${GVX_CONFIG_SRC:-}
GVX_HANDLER=${GVX_HANDLER:-gvx}
GVX_POD_ANNOTATIONS=${GVX_POD_ANNOTATIONS:-'"dev.gvx.docker", "dev.gvx.max-lifetime", "dev.gvx.memory-high", "dev.gvx.rootfs-size"'}
GVX_INSTALLER_STATE=${GVX_INSTALLER_STATE:-/etc/gvx/installer}
RESTART=${RESTART:-systemd}
RESTART_CMD=${RESTART_CMD:-}
CONTAINERD_UNIT=${CONTAINERD_UNIT:-containerd}
GVX_POOL_UNIT=${GVX_POOL_UNIT:-/etc/systemd/system/gvx-pool.service}
SYSTEMCTL=${SYSTEMCTL:-nsenter -t 1 -m -u -i -n -p -- systemctl}
FORCE=${FORCE:-0}
UNINSTALL_ON_STOP=${UNINSTALL_ON_STOP:-false}

BINARIES="containerd-shim-gvx-v2 gvx-shim gvx-sentry gvx-runtime gvx-hook gvx-pause gvx-relay gvx-nat gvx"

STATE=$HOST_ROOT$GVX_INSTALLER_STATE
MANIFEST=$STATE/manifest
BACKUP=$STATE/backup
CHANGED=0

log() { echo "gvx-installer: $*"; }
die() { echo "gvx-installer: $*" >&2; exit 1; }

# host P: the installer's path of the node's path P.
host() { printf '%s%s' "$HOST_ROOT" "$1"; }

abs() {
	case $2 in
	/*) ;;
	*) die "$1=$2 is not an absolute path; give the node's path, e.g. $1=$3" ;;
	esac
}

check_env() {
	case $HOST_ROOT in
	/*) ;;
	*) die "HOST_ROOT=$HOST_ROOT is not an absolute path (the node's / as this script sees it, e.g. /host)" ;;
	esac
	[ -d "$HOST_ROOT" ] || die "HOST_ROOT=$HOST_ROOT is not a directory: mount the node's / (or its /etc and /opt) there"
	abs GVX_BIN_DIR "$GVX_BIN_DIR" /opt/gvx/bin
	abs CONTAINERD_CONFIG "$CONTAINERD_CONFIG" /etc/containerd/config.toml
	abs CONTAINERD_DROPIN "$CONTAINERD_DROPIN" /etc/containerd/conf.d/gvx.toml
	abs GVX_CONFIG "$GVX_CONFIG" /etc/gvx/config.toml
	abs GVX_INSTALLER_STATE "$GVX_INSTALLER_STATE" /etc/gvx/installer
	abs GVX_POOL_UNIT "$GVX_POOL_UNIT" /etc/systemd/system/gvx-pool.service
	case $GVX_POOL_UNIT in
	*.service) ;;
	*) die "GVX_POOL_UNIT=$GVX_POOL_UNIT: a systemd unit's name ends in .service, e.g. /etc/systemd/system/gvx-pool.service" ;;
	esac
	case $RESTART in
	systemd | none) ;;
	command) [ -n "$RESTART_CMD" ] || die "RESTART=command needs RESTART_CMD (a shell command that restarts the node's containerd)" ;;
	*) die "RESTART=$RESTART: want systemd, command or none" ;;
	esac
}

# recorded LINE: is LINE in the manifest?
recorded() { [ -f "$MANIFEST" ] && grep -qxF "$1" "$MANIFEST"; }

record() { recorded "$1" || printf '%s\n' "$1" >>"$MANIFEST"; }

# start_state creates the state directory, recording the directories it
# had to create (its ancestors included) as the manifest's first lines.
start_state() {
	[ -f "$MANIFEST" ] && return 0
	made=""
	d=$GVX_INSTALLER_STATE
	while [ "$d" != / ] && [ ! -d "$(host "$d")" ]; do
		made="$d $made"
		d=$(dirname "$d")
	done
	mkdir -p "$BACKUP"
	: >"$MANIFEST"
	for d in $made; do record "statedir $d"; done
}

# ensure_dir D: the node's directory D exists; record it if this made it.
ensure_dir() {
	[ -d "$(host "$1")" ] && return 0
	[ -e "$(host "$1")" ] && die "$1 exists on the node and is not a directory; move it away"
	ensure_dir "$(dirname "$1")"
	record "dir $1"
	mkdir "$(host "$1")"
	chmod 0755 "$(host "$1")"
}

# put_file SRC P MODE: the node's file P gets SRC's content with MODE. A
# file that was there first and is not the installer's is backed up first.
put_file() {
	src=$1 p=$2 mode=$3 h=$(host "$2")
	ensure_dir "$(dirname "$p")"
	if [ -e "$h" ] || [ -L "$h" ]; then
		if ! recorded "file $p" && ! recorded "replaced $p"; then
			[ -f "$h" ] && [ ! -L "$h" ] || die "$p exists on the node and is not a regular file; move it away"
			mkdir -p "$BACKUP$(dirname "$p")"
			cp -p "$h" "$BACKUP$p"
			record "replaced $p"
		fi
		if cmp -s "$src" "$h" && [ "$(stat -c %a "$h")" = "${mode#0}" ]; then
			return 0
		fi
	else
		record "file $p"
	fi
	tmp=$h.gvx-new.$$
	cp "$src" "$tmp"
	chmod "$mode" "$tmp"
	mv -f "$tmp" "$h"
	log "wrote $p"
	CHANGED=1
}

# --- containerd's config -----------------------------------------------

import_entry() { printf '%s%s' "$NODE_ROOT" "$CONTAINERD_DROPIN"; }

# config_version F: the top-level version of containerd config F ("" if none).
config_version() {
	awk '/^[[:space:]]*\[/ { exit }
		/^[[:space:]]*version[[:space:]]*=/ { v = $0; sub(/^[^=]*=[[:space:]]*/, "", v); sub(/[^0-9].*$/, "", v); print v; exit }' "$1"
}

# has_keys F: does F hold anything but comments and blank lines?
has_keys() { grep -qv -e '^[[:space:]]*$' -e '^[[:space:]]*#' "$1"; }

# imports_text F: the top-level imports array of F (all its lines), if any.
imports_text() {
	awk '/^[[:space:]]*\[/ && !on { exit }
		/^[[:space:]]*imports[[:space:]]*=/ { on = 1 }
		on { print; if ($0 ~ /\]/) exit }' "$1"
}

# check_version F: containerd config F can import (version 2 or 3).
check_version() {
	v=$(config_version "$1")
	case $v in
	2 | 3) ;;
	*) die "$CONTAINERD_CONFIG has no top-level 'version = 2' or 'version = 3' (containerd reads it as version ${v:-1}, which has no imports): migrate it with 'containerd config migrate', or set CONTAINERD_CONFIG to the file containerd reads; nothing was changed" ;;
	esac
}

# add_import IN OUT: OUT is containerd config IN importing the fragment.
add_import() {
	e=$(import_entry)
	if ! has_keys "$1"; then
		{ cat "$1"; printf 'version = 3\nimports = ["%s"]\n' "$e"; } >"$2"
		return 0
	fi
	check_version "$1"
	if [ -n "$(imports_text "$1")" ]; then
		# First '[' after 'imports =' on its line: put the entry first,
		# for a one-line or a multi-line array alike.
		awk -v e="$e" '/^[[:space:]]*\[/ { top = 1 }
			!top && !done && /^[[:space:]]*imports[[:space:]]*=/ {
				if ($0 ~ /=[[:space:]]*\[[[:space:]]*\]/) sub(/=[[:space:]]*\[[[:space:]]*\]/, "= [\"" e "\"]")
				else sub(/=[[:space:]]*\[/, "= [\"" e "\", ")
				done = 1
			}
			{ print }' "$1" >"$2"
	else
		awk -v e="$e" '{ print }
			!done && /^[[:space:]]*version[[:space:]]*=/ { print "imports = [\"" e "\"]"; done = 1 }' "$1" >"$2"
	fi
}

# remove_import IN OUT: OUT is IN without the fragment's import (for a
# config someone changed after install, when the backup cannot go back).
remove_import() {
	e=$(import_entry)
	awk -v e="$e" 'BEGIN { q = "\"" e "\"" }
		$0 == "imports = [" q "]" { next }
		/^[[:space:]]*\[/ { top = 1 }
		!top {
			i = index($0, q ", "); if (i) { $0 = substr($0, 1, i - 1) substr($0, i + length(q) + 2) }
			else { i = index($0, ", " q); if (i) { $0 = substr($0, 1, i - 1) substr($0, i + length(q) + 2) }
			else { i = index($0, q); if (i) { $0 = substr($0, 1, i - 1) substr($0, i + length(q)) } } }
		}
		{ print }' "$1" >"$2"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# import_fragment makes containerd's config import the fragment.
import_fragment() {
	p=$CONTAINERD_CONFIG h=$(host "$CONTAINERD_CONFIG")
	e=$(import_entry)
	if [ -f "$h" ] && imports_text "$h" | grep -qF "\"$e\""; then
		return 0
	fi
	ensure_dir "$(dirname "$p")"
	new=$h.gvx-new.$$
	# The manifest says how uninstall undoes this: "edited P SUM" restores
	# the backup while the file is still as written here (SUM), and
	# "newconfig P SUM" removes a file this made; a file changed since
	# (or edited a second time, "-") only loses its import.
	kind=edited
	if grep -q "^newconfig $p " "$MANIFEST"; then
		kind=newconfig
	fi
	if [ -e "$h" ]; then
		[ -f "$h" ] && [ ! -L "$h" ] || die "$p is not a regular file: set CONTAINERD_CONFIG to the file containerd reads"
		add_import "$h" "$new" || { rm -f "$new"; exit 1; }
		chmod "$(stat -c %a "$h")" "$new"
		sum=$(sha "$new")
		if grep -q "^$kind $p " "$MANIFEST"; then
			sum=-
		else
			mkdir -p "$BACKUP$(dirname "$p")"
			cp -p "$h" "$BACKUP$p"
		fi
	else
		: >"$new.empty"
		add_import "$new.empty" "$new"
		rm -f "$new.empty"
		chmod 0644 "$new"
		kind=newconfig
		sum=$(sha "$new")
	fi
	grep -v "^$kind $p " "$MANIFEST" >"$MANIFEST.new" || true
	printf '%s %s %s\n' "$kind" "$p" "$sum" >>"$MANIFEST.new"
	mv -f "$MANIFEST.new" "$MANIFEST"
	mv -f "$new" "$h"
	log "$p imports $e"
	CHANGED=1
}

fragment() {
	cat <<EOF
# gvx's runtime handler, written by gvx's installer (deploy/installer/install.sh);
# its uninstall removes this file and the import of it.
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.$GVX_HANDLER]
  runtime_type = "io.containerd.gvx.v2"
  runtime_path = "$NODE_ROOT$GVX_BIN_DIR/containerd-shim-gvx-v2"
  pod_annotations = [$GVX_POD_ANNOTATIONS]
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.$GVX_HANDLER.options]
    ConfigPath = "$NODE_ROOT$GVX_CONFIG"
# A dead shim's cleanup (its sandbox destroyed, mounts and cgroups released)
# can outlast containerd's default 5 s on a loaded node.
[timeouts]
  "io.containerd.timeout.shim.cleanup" = "30s"
EOF
}

default_gvx_config() {
	cat <<EOF
# gvx's configuration on this node, written by gvx's installer: every key
# is in README.md "Configuration". Give your own with GVX_CONFIG_SRC (the
# DaemonSet's ConfigMap gvx-config).
log_level = "info"
EOF
}

# systemctl_node ARGS: systemctl ARGS on the node (SYSTEMCTL).
systemctl_node() { $SYSTEMCTL "$@"; }

# --- the pool server ---------------------------------------------------

# pool_size F: the [pool] size of gvx config F (a [pool] table's size, or
# a top-level pool.size), 0 without one.
pool_size() {
	awk 'function val(l) { sub(/^[^=]*=[[:space:]]*/, "", l); sub(/[^0-9].*$/, "", l); return l + 0 }
		{ l = $0; sub(/#.*$/, "", l) }
		l ~ /^[[:space:]]*\[/ { t = l; gsub(/[[:space:]]/, "", t); inpool = (t == "[pool]"); table = 1; next }
		inpool && l ~ /^[[:space:]]*size[[:space:]]*=/ { n = val(l); exit }
		!table && l ~ /^[[:space:]]*pool\.size[[:space:]]*=/ { n = val(l); exit }
		END { print n + 0 }' "$1"
}

pool_service() { basename "$GVX_POOL_UNIT"; }

# pool_unit_ours: did an install write GVX_POOL_UNIT (new or replacing)?
pool_unit_ours() { recorded "file $GVX_POOL_UNIT" || recorded "replaced $GVX_POOL_UNIT"; }

pool_exec() { printf '%s%s/gvx pool serve --config %s%s' "$NODE_ROOT" "$GVX_BIN_DIR" "$NODE_ROOT" "$GVX_CONFIG"; }

pool_unit() {
	cat <<EOF
# gvx's warm pool server, written by gvx's installer (deploy/installer/install.sh)
# because $GVX_CONFIG has a [pool]; its uninstall stops and removes this unit.
[Unit]
Description=gvx warm pool of gVisor sandboxes
After=containerd.service

[Service]
ExecStart=$(pool_exec)
KillSignal=SIGTERM
# Stopping destroys the ready sandboxes (about 15 ms each).
TimeoutStopSec=60
# The sandboxes it boots belong to their tasks once handed out: stopping
# the server must not kill them.
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
EOF
}

# start_pool CHANGED: the pool server runs, restarted if CHANGED is 1 (its
# unit, binaries or config are new).
start_pool() {
	svc=$(pool_service)
	case $RESTART in
	systemd)
		if [ "$1" = 1 ]; then
			log "restarting the pool server: systemctl enable $svc, restart $svc (in the node's namespaces)"
			systemctl_node enable "$svc" && systemctl_node restart "$svc" ||
				die "systemctl could not start $svc: see 'journalctl -u $svc' on the node"
		else
			systemctl_node start "$svc" || die "systemctl start $svc failed: see 'journalctl -u $svc' on the node"
		fi
		;;
	*)
		if [ "$1" = 1 ]; then
			log "the pool server's unit is $GVX_POOL_UNIT (RESTART=$RESTART): start it yourself (systemctl daemon-reload; systemctl enable --now $svc), or run $(pool_exec) as a service"
		fi
		;;
	esac
}

# stop_pool: with systemd, stop and disable the pool server of the unit
# the installer wrote.
stop_pool() {
	pool_unit_ours || return 0
	[ "$RESTART" = systemd ] || return 0
	svc=$(pool_service)
	log "stopping the pool server: systemctl disable --now $svc (in the node's namespaces)"
	systemctl_node disable --now "$svc" || die "systemctl disable --now $svc failed: stop it on the node, then uninstall again"
}

# drop_pool_unit: a config without a pool removes the unit an earlier
# install wrote.
drop_pool_unit() {
	recorded "file $GVX_POOL_UNIT" || return 0
	stop_pool
	rm -f "$(host "$GVX_POOL_UNIT")"
	grep -vxF "file $GVX_POOL_UNIT" "$MANIFEST" >"$MANIFEST.new" || true
	mv -f "$MANIFEST.new" "$MANIFEST"
	if [ "$RESTART" = systemd ]; then
		systemctl_node daemon-reload
	fi
	log "removed $GVX_POOL_UNIT: $GVX_CONFIG has no [pool]"
	CHANGED=1
}

restart_containerd() {
	if [ "$CHANGED" = 0 ]; then
		log "containerd's configuration unchanged: no restart"
		return 0
	fi
	case $RESTART in
	none) log "restart containerd yourself to load the change (RESTART=none)" ;;
	command)
		log "restarting containerd: $RESTART_CMD"
		sh -c "$RESTART_CMD" || die "RESTART_CMD failed ($RESTART_CMD): containerd may not have the change; restart it by hand"
		;;
	systemd)
		log "restarting containerd: systemctl restart $CONTAINERD_UNIT (in the node's namespaces)"
		systemctl_node restart "$CONTAINERD_UNIT" ||
			die "systemctl restart $CONTAINERD_UNIT failed: the installer needs hostPID and privileged, and a systemd node (set RESTART=command with RESTART_CMD, or RESTART=none and restart containerd yourself)"
		;;
	esac
}

do_install() {
	for b in $BINARIES; do
		[ -f "$GVX_SRC/$b" ] || die "$GVX_SRC/$b missing: GVX_SRC must hold gvx's binaries ($BINARIES; make build puts them in _output/bin)"
	done
	if [ -n "$GVX_CONFIG_SRC" ] && [ ! -f "$GVX_CONFIG_SRC" ]; then
		die "GVX_CONFIG_SRC=$GVX_CONFIG_SRC is not a file"
	fi
	h=$(host "$CONTAINERD_CONFIG")
	if [ -f "$h" ] && has_keys "$h"; then
		check_version "$h"
	fi
	start_state
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	for b in $BINARIES; do put_file "$GVX_SRC/$b" "$GVX_BIN_DIR/$b" 0755; done
	bins=$CHANGED
	CHANGED=0
	if [ -n "$GVX_CONFIG_SRC" ]; then
		cp "$GVX_CONFIG_SRC" "$work/config.toml"
	else
		default_gvx_config >"$work/config.toml"
	fi
	put_file "$work/config.toml" "$GVX_CONFIG" 0644
	# The shim reads gvx's config at each create: only containerd's own
	# files below need a restart.
	cfg=$CHANGED
	CHANGED=0
	if [ "$(pool_size "$work/config.toml")" -gt 0 ]; then
		pool_unit >"$work/pool.service"
		put_file "$work/pool.service" "$GVX_POOL_UNIT" 0644
		pool=$CHANGED
		CHANGED=0
		if [ "$pool" = 1 ] && [ "$RESTART" = systemd ]; then
			systemctl_node daemon-reload || die "systemctl daemon-reload failed: systemd did not load $GVX_POOL_UNIT"
		fi
		# New binaries or a new config need a new server too.
		[ "$bins$cfg$pool" = 000 ] || pool=1
		start_pool "$pool"
	else
		drop_pool_unit
		pool=$CHANGED
		CHANGED=0
	fi
	fragment >"$work/fragment.toml"
	put_file "$work/fragment.toml" "$CONTAINERD_DROPIN" 0644
	import_fragment
	restart_containerd
	[ "$bins$cfg$pool$CHANGED" = 0000 ] && log "already installed, nothing changed"
	log "installed: runtime handler $GVX_HANDLER (RuntimeClass handler: $GVX_HANDLER)"
}

# running BIN: pids of processes started from the installed binary BIN.
running() {
	want=$NODE_ROOT$GVX_BIN_DIR/$1
	for d in /proc/[0-9]*; do
		x=$(readlink "$d/exe" 2>/dev/null) || continue
		[ "$x" = "$want" ] || [ "$x" = "$want (deleted)" ] || continue
		printf '%s ' "${d#/proc/}"
	done
}

do_uninstall() {
	if [ ! -f "$MANIFEST" ]; then
		log "nothing to uninstall ($GVX_INSTALLER_STATE/manifest not found)"
		return 0
	fi
	pids="$(running containerd-shim-gvx-v2)$(running gvx-shim)"
	if [ -n "$pids" ] && [ "$FORCE" != 1 ]; then
		die "gvx shims are running on this node (pids $pids): drain its gvx pods first (kubectl drain, or cordon and delete them); FORCE=1 uninstalls anyway and leaves those pods without a runtime"
	fi
	stop_pool
	pids=$(running gvx)
	if [ -n "$pids" ] && [ "$FORCE" != 1 ]; then
		die "processes run the installed $GVX_BIN_DIR/gvx (pids $pids: a pool server, gvx serve): stop them first (systemctl stop $(pool_service), for the installer's pool server); FORCE=1 uninstalls anyway and leaves them running"
	fi
	unit=0
	if pool_unit_ours; then
		unit=1
	fi
	CHANGED=0
	# In this shell (not a pipe's subshell): a failure stops the script
	# before the backups go.
	tac "$MANIFEST" >"$STATE/undo"
	while read -r kind p sum; do
		h=$(host "$p")
		case $kind in
		file)
			if [ -e "$h" ] || [ -L "$h" ]; then rm -f "$h" && log "removed $p"; fi
			;;
		replaced)
			cp -p "$BACKUP$p" "$h.gvx-old.$$" && mv -f "$h.gvx-old.$$" "$h" && log "restored $p"
			;;
		edited | newconfig)
			if [ -f "$h" ] && [ "$(sha "$h")" = "$sum" ] && [ "$kind" = newconfig ]; then
				rm -f "$h" && log "removed $p"
			elif [ -f "$h" ] && [ "$(sha "$h")" = "$sum" ]; then
				cp -p "$BACKUP$p" "$h.gvx-old.$$" && mv -f "$h.gvx-old.$$" "$h" && log "restored $p"
			elif [ -f "$h" ]; then
				remove_import "$h" "$h.gvx-old.$$"
				chmod "$(stat -c %a "$h")" "$h.gvx-old.$$"
				mv -f "$h.gvx-old.$$" "$h"
				log "$p changed since install: removed only its import of $(import_entry)"
			fi
			;;
		dir)
			if [ -d "$h" ]; then
				rmdir "$h" 2>/dev/null && log "removed $p/" || log "left $p/: not empty (files not gvx's)"
			fi
			;;
		esac
	done <"$STATE/undo"
	statedirs=$(grep '^statedir ' "$MANIFEST" | cut -d' ' -f2 | sort -r)
	rm -rf "$STATE"
	for d in $statedirs; do
		[ -d "$(host "$d")" ] || continue
		rmdir "$(host "$d")" 2>/dev/null && log "removed $d/" || log "left $d/: not empty (files not gvx's)"
	done
	CHANGED=1
	if [ "$unit" = 1 ] && [ "$RESTART" = systemd ]; then
		systemctl_node daemon-reload || log "systemctl daemon-reload failed: systemd still lists $(pool_service) until it reloads"
	fi
	restart_containerd
	log "uninstalled"
}

do_status() {
	if [ ! -f "$MANIFEST" ]; then
		echo "gvx: not installed by this installer"
		return 0
	fi
	echo "gvx: installed (manifest $GVX_INSTALLER_STATE/manifest):"
	sed 's/^/  /' "$MANIFEST"
}

do_wait() {
	sleeper=""
	trap 'kill $sleeper 2>/dev/null; if [ "$UNINSTALL_ON_STOP" = true ]; then do_uninstall; fi; exit 0' TERM INT
	log "waiting (UNINSTALL_ON_STOP=$UNINSTALL_ON_STOP)"
	while :; do
		sleep 3600 &
		sleeper=$!
		wait $sleeper || true
	done
}

check_env
case ${1:-} in
install) do_install ;;
uninstall) do_uninstall ;;
status) do_status ;;
wait) do_wait ;;
*) die "usage: install.sh install|uninstall|status|wait (environment: see the top of this script)" ;;
esac
