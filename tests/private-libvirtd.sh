#!/bin/bash
# A libvirtd of its own, in a mount namespace of its own, so that a test or
# an experiment can run libvirt with another qemu.conf without touching the
# host's libvirtd (other people's tests use it).  Over /etc/libvirt (a copy
# of the host's, without its domains and autostart links), /run/libvirt,
# /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt go directories
# under DIR; /dev/kvm, when it exists, is replaced by a node root:kvm 0660
# (what udev makes on a normal host: libvirt re-probes QEMU at every start
# when its user cannot open /dev/kvm).  The namespace shares everything
# else with the host (network, /tmp, the project's files).
#
#   private-libvirtd.sh start DIR USER GROUP   qemu.conf's user and group
#   private-libvirtd.sh run DIR CMD...         CMD inside the namespace
#   private-libvirtd.sh stop DIR               destroy its domains, stop it
#
# Inside, give virsh absolute paths (nsenter keeps the caller's directory,
# relative paths fail).  Everything is stopped by its own pid file.
set -eu
cmd=${1:?usage: private-libvirtd.sh start|run|stop DIR ...}
P=${2:?usage: private-libvirtd.sh start|run|stop DIR ...}
case $P in /*) ;; *) P=$(pwd)/$P ;; esac

holder() { cat "$P/holder.pid" 2>/dev/null; }
alive() { local h; h=$(holder); [ -n "$h" ] && kill -0 "$h" 2>/dev/null; }

case $cmd in
start)
	user=${3:?user} group=${4:?group}
	if alive; then
		echo "private-libvirtd: already running in $P" >&2
		exit 1
	fi
	mkdir -p "$P"
	rm -rf "${P:?}"/{etc,run,lib,cache,log,kvm,holder.pid,*.pid}
	mkdir -p "$P"/{etc,run,lib,cache,log}
	cp -a /etc/libvirt/. "$P/etc/"
	rm -f "$P"/etc/qemu/*.xml "$P"/etc/qemu/autostart/* "$P"/etc/qemu/networks/autostart/*
	sed -i -e '/^[[:space:]]*user[[:space:]]*=/d' -e '/^[[:space:]]*group[[:space:]]*=/d' \
		"$P/etc/qemu.conf"
	printf 'user = "%s"\ngroup = "%s"\n' "$user" "$group" >> "$P/etc/qemu.conf"
	mkdir -p "$P"/lib/{boot,images,qemu,sanlock} "$P/cache/qemu" "$P/log/qemu"
	chmod 711 "$P/lib/boot" "$P/lib/images" "$P/cache" "$P/cache/qemu"
	chmod 750 "$P/lib/qemu"
	chmod 700 "$P/lib/sanlock"
	kvm=
	if [ -e /dev/kvm ]; then
		mknod "$P/kvm" c 10 232
		chgrp kvm "$P/kvm"
		chmod 660 "$P/kvm"
		kvm=1
	fi
	P=$P kvm=$kvm unshare -m --propagation private -- bash -c '
		mount --bind "$P/etc" /etc/libvirt
		mount --bind "$P/run" /run/libvirt
		mount --bind "$P/lib" /var/lib/libvirt
		mount --bind "$P/cache" /var/cache/libvirt
		mount --bind "$P/log" /var/log/libvirt
		[ -z "$kvm" ] || mount --bind "$P/kvm" /dev/kvm
		virtlogd -d -p "$P/virtlogd.pid"
		libvirtd -d -p "$P/libvirtd.pid"
		echo $$ > "$P/holder.pid"
		exec sleep infinity' </dev/null >"$P/holder.out" 2>&1 &
	# libvirtd answers in 1 to 9 s (the more guests the host runs, the
	# longer its start): up to 60 s.
	for _ in $(seq 600); do
		if [ -s "$P/holder.pid" ] &&
		   nsenter -m -t "$(holder)" virsh -c qemu:///system version >/dev/null 2>&1; then
			exit 0
		fi
		sleep 0.1
	done
	echo "private-libvirtd: libvirtd in $P did not answer" >&2
	cat "$P/holder.out" >&2
	exit 1
	;;
run)
	shift 2
	alive || { echo "private-libvirtd: none running in $P" >&2; exit 1; }
	exec nsenter -m -t "$(holder)" -- "$@"
	;;
stop)
	alive || exit 0
	h=$(holder)
	for d in $(nsenter -m -t "$h" virsh -c qemu:///system list --all --name 2>/dev/null); do
		nsenter -m -t "$h" virsh -c qemu:///system destroy "$d" >/dev/null 2>&1 || true
		nsenter -m -t "$h" virsh -c qemu:///system undefine --managed-save \
			--snapshots-metadata "$d" >/dev/null 2>&1 || true
	done
	for f in libvirtd virtlogd; do
		p=$(cat "$P/$f.pid" 2>/dev/null || true)
		if [ -n "$p" ] && kill "$p" 2>/dev/null; then
			for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		fi
	done
	# The mounts go with the namespace, i.e. with its last process.
	kill "$h" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$h" 2>/dev/null || break; sleep 0.1; done
	rm -f "$P/holder.pid"
	;;
*)
	echo "usage: private-libvirtd.sh start DIR USER GROUP | run DIR CMD... | stop DIR" >&2
	exit 2
	;;
esac
