#!/bin/bash
# `make install` and `make uninstall` into a DESTDIR: every file where the
# layout says (programs, recipes, dashboard, desktop page, noVNC, the
# terminal's xterm.js, docs, units, berth.conf), the units' paths
# following PREFIX, systemd-analyze verify on the installed units
# (tests/verify-units.sh, which must also fail on a broken one), the
# installed berth-hostd finding the installed recipes (it builds the tiny
# image from them), the installed berth-web finding the installed
# dashboard and xterm.js, the installed berth-desktop finding the
# installed page and noVNC, berth.conf never
# overwritten, and uninstall removing what install put there and nothing
# else (not the state directory, not a changed berth.conf).
. "$(dirname "$0")/../lib.sh"

D=$T/root
P=$D/usr/local
SRC_NOVNC=$ROOT/build/node/node_modules/@novnc/novnc
SRC_XTERM=$ROOT/build/node/node_modules/@xterm
mk() { make -C "$ROOT" --no-print-directory "$@" >>"$T/make.log" 2>&1; }
# Every file and link under DESTDIR, relative to it (exits non-zero when
# it cannot look).
files() { (cd "$D" && find . \( -type f -o -type l \) ! -path './lib/systemd/system/*' | sort); }

if [ ! -f "$SRC_NOVNC/core/rfb.js" ]; then
	skip "no noVNC in build/node: deploy/install-deps.sh run fetches it"
	finish
fi
check "make install DESTDIR" mk install DESTDIR="$D" || tail -20 "$T/make.log"
for f in bin/berth bin/berth-hostd bin/berth-sshgw bin/berth-desktop bin/berth-web; do
	check "$f installed, executable" test -x "$P/$f"
done
check "recipes in lib/berth/recipes (tiny.sh, executable; lib/)" \
	test -x "$P/lib/berth/recipes/tiny.sh" -a -f "$P/lib/berth/recipes/lib/debian-build.sh"
check "the dashboard in share/berth/web" cmp "$ROOT/web/page/app.js" "$P/share/berth/web/app.js"
check "the desktop page in share/berth/desktop" \
	cmp "$ROOT/desktop/page/desktop.js" "$P/share/berth/desktop/desktop.js"
check "noVNC in share/berth/novnc" cmp "$SRC_NOVNC/core/rfb.js" "$P/share/berth/novnc/core/rfb.js"
for f in xterm/lib/xterm.js xterm/css/xterm.css xterm/LICENSE addon-fit/lib/addon-fit.js addon-fit/LICENSE; do
	check "the terminal's $f in share/berth/xterm" cmp "$SRC_XTERM/$f" "$P/share/berth/xterm/$f"
done
check "docs in share/doc/berth" test -f "$P/share/doc/berth/README.md" -a \
	-f "$P/share/doc/berth/architecture.md"
check "berth.conf in etc/berth" cmp "$ROOT/deploy/berth.conf" "$D/etc/berth/berth.conf"
for u in berth-hostd berth-sshgw berth-desktop berth-web; do
	check_match "$u.service: ExecStart in PREFIX/bin" \
		"^ExecStart=/usr/local/bin/$u --state /var/lib/berth " \
		"$(grep '^ExecStart=' "$D/etc/systemd/system/$u.service")"
done
check_eq "a file for everyone to read: mode 0644 root (web)" "644 0" \
	"$(stat -c '%a %u' "$P/share/berth/web/index.html")"

# systemd-analyze verify, and its negative control.
verify_units() { bash "$ROOT/tests/verify-units.sh" "$D" >"$T/verify.out" 2>&1; }
check "systemd-analyze verify: the installed units" verify_units || sed 's/^/# /' "$T/verify.out"
cp "$D/etc/systemd/system/berth-sshgw.service" "$T/sshgw.good"
sed -i 's/^ProtectSystem=strict$/ProtectSystem=stricter/' "$D/etc/systemd/system/berth-sshgw.service"
if verify_units; then
	not_ok "verify-units fails on a bad value"
else
	check_match "verify-units fails on a bad value, naming it" "berth-sshgw.service:[0-9]+:.*stricter" \
		"$(cat "$T/verify.out")"
fi
cp "$T/sshgw.good" "$D/etc/systemd/system/berth-sshgw.service"

# Another PREFIX and SYSCONFDIR: the units follow.
check "make install PREFIX=/opt/b SYSCONFDIR=/opt/etc" \
	mk install DESTDIR="$T/opt" PREFIX=/opt/b SYSCONFDIR=/opt/etc
check_eq "PREFIX=/opt/b: hostd's ExecStart" \
	"ExecStart=/opt/b/bin/berth-hostd --state /var/lib/berth --config /opt/etc/berth/berth.conf" \
	"$(grep '^ExecStart=' "$T/opt/etc/systemd/system/berth-hostd.service")"
check "PREFIX=/opt/b: make uninstall" mk uninstall DESTDIR="$T/opt" PREFIX=/opt/b SYSCONFDIR=/opt/etc
check_absent "PREFIX=/opt/b: nothing left but directories" find "$T/opt" ! -type d

# The installed hostd finds the installed recipes, berth-web the installed
# dashboard, by themselves (no recipes_dir, no web_dir): nothing else is
# there (no source tree above PREFIX/bin, no /usr/share/berth).
HTTP=$(free_port)
mkdir -p "$STATE"
echo "http_listen = 127.0.0.1:$HTTP" >"$STATE/berth.conf"
BIN=$P/bin   # what start_hostd and berth (lib.sh) run
if start_hostd; then
	check_match "installed hostd: recipes in PREFIX/lib/berth/recipes" \
		"recipes $P/bin/../lib/berth/recipes\$" "$(grep -o 'recipes /.*' "$T/hostd.log" | head -1)"
	check "installed hostd: builds the tiny image from them" build_tiny
	web_up || not_ok "installed berth-web starts"
	check_match "installed berth-web: the dashboard from PREFIX/share/berth/web" \
		"from $P/bin/../share/berth/web;" "$(grep -o 'from .*' "$T/web.log")"
	curl -s -o "$T/index.html" "http://127.0.0.1:$HTTP/"
	check "installed berth-web: serves the installed dashboard" cmp "$ROOT/web/page/index.html" "$T/index.html"
	check_absent "installed berth-web: no warning about the dashboard" matching 'dashboard: no' cat "$T/web.log"
	curl -s -o "$T/xterm.js" "http://127.0.0.1:$HTTP/xterm/xterm/lib/xterm.js"
	check "installed berth-web: serves the installed xterm.js" cmp "$SRC_XTERM/xterm/lib/xterm.js" "$T/xterm.js"
	check_absent "installed berth-web: no warning about the terminal" matching "terminal: no" cat "$T/web.log"

	DPORT=$(free_port)
	"$P/bin/berth-desktop" --state "$STATE" --listen "127.0.0.1:$DPORT" --user berth-desktop \
		>>"$T/desktop.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 50); do
		grep -q "listening on" "$T/desktop.log" && break
		kill -0 "${PIDS[-1]}" 2>/dev/null || break
		sleep 0.1
	done
	check_match "installed desktop: its page and noVNC under PREFIX/share/berth" \
		"page $P/bin/../share/berth/desktop; noVNC $P/bin/../share/berth/novnc\$" \
		"$(grep -o 'page .*' "$T/desktop.log")" || sed 's/^/# /' "$T/desktop.log"
	curl -s -o "$T/rfb.js" "http://127.0.0.1:$DPORT/novnc/core/rfb.js"
	check "installed desktop: serves noVNC" cmp "$SRC_NOVNC/core/rfb.js" "$T/rfb.js"
	curl -s -o "$T/desktop.js" "http://127.0.0.1:$DPORT/page/desktop.js"
	check "installed desktop: serves its page" cmp "$ROOT/desktop/page/desktop.js" "$T/desktop.js"
	kill "${PIDS[-1]}"
	berth image rm tiny >/dev/null 2>&1
	kill_hostd
else
	not_ok "the installed hostd starts"
fi

# Installing again keeps a changed berth.conf; uninstall keeps it too, and
# never touches the state directory.
echo "log_level = debug" >>"$D/etc/berth/berth.conf"
check "make install again" mk install DESTDIR="$D"
check_eq "berth.conf not overwritten" "log_level = debug" "$(tail -n 1 "$D/etc/berth/berth.conf")"
mkdir -p "$D/var/lib/berth"
echo keep >"$D/var/lib/berth/berth.db"
check "make uninstall" mk uninstall DESTDIR="$D"
check_eq "uninstall: left the state and the changed berth.conf, nothing else" \
	"$(printf './etc/berth/berth.conf\n./var/lib/berth/berth.db')" "$(files)"
check "make install, then uninstall with berth.conf unchanged" \
	mk install DESTDIR="$D"
cp "$ROOT/deploy/berth.conf" "$D/etc/berth/berth.conf"
mk uninstall DESTDIR="$D"
check_eq "uninstall: an unchanged berth.conf goes" "./var/lib/berth/berth.db" "$(files)"
check_missing "uninstall: etc/berth removed when empty" "$D/etc/berth"

check "deploy/install.sh: sh -n" sh -n "$ROOT/deploy/install.sh"
# Bad arguments are refused before anything is installed (the checks come
# before install-deps: a mistake here would install packages).
install_sh() { sh "$ROOT/deploy/install.sh" "$@" 2>&1; echo "exit $?"; }
check_match "deploy/install.sh: refuses a bad port" "not a number from 1 to 65535.*exit 2" \
	"$(install_sh --ssh-port '22; reboot')"
check_match "deploy/install.sh: refuses port 0" "not a number from 1 to 65535.*exit 2" \
	"$(install_sh --ssh-port 0)"
check_match "deploy/install.sh: refuses a --disk that is no block device" \
	"'$T/nodisk' is not a block device.*exit 1" "$(install_sh --disk "$T/nodisk")"
check_match "deploy/install.sh: refuses a relative --prefix" "not an absolute path.*exit 2" \
	"$(install_sh --prefix usr)"
check_match "deploy/install.sh: refuses an unknown argument" "unknown argument '--yes'.*exit 2" \
	"$(install_sh --yes)"
finish
