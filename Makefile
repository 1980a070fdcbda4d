# berth: one non-recursive build.  `make` builds bin/, `make test` runs every
# test, `make run` starts the embedded default, `make asan` builds with
# AddressSanitizer/UBSan into build/asan/bin (`make test-asan` runs the suite
# on those binaries), `make fuzz` builds the libFuzzer harnesses with clang
# into build/fuzz/ and runs each for FUZZ_SECONDS.  `make install` puts
# berth in PREFIX (default /usr/local; DESTDIR honoured), `make uninstall`
# takes it out again, `make verify-units` checks the systemd units.  Quiet
# unless V=1.

CC      ?= cc
PKGS    := libvirt sqlite3 libmicrohttpd jansson libssh libcurl libzstd libcrypto libnbd \
           libnftables zlib
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral \
           -Wno-missing-field-initializers -Wformat-truncation
CFLAGS  ?= -O2 -g
BASE_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -I. -MMD -MP \
           $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread
# berth-desktop alone links libvncserver and libvncclient.
VNC_LIBS := $(shell pkg-config --libs libvncserver libvncclient 2>/dev/null)

ifeq ($(SANITIZE),1)
OUT     := build/asan
CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
           -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
else
OUT     := build/default
endif
BIN     := $(if $(filter 1,$(SANITIZE)),$(OUT)/bin,bin)

ifneq ($(V),1)
Q := @
quiet = @printf '  %-6s %s\n' $(1) $(2);
endif

COMMON_SRC  := common/log.c common/util.c common/run.c common/buf.c \
               common/err.c common/sshexec.c common/hostapi.c common/daemon.c \
               common/addrcount.c common/netpolicy.c
STORAGE_SRC := storage/storage.c storage/qcow2.c storage/lvm_thin.c storage/volio.c
HOSTD_SRC   := hostd/main.c hostd/hostd.c hostd/busy.c hostd/config.c hostd/db.c hostd/virt.c \
               hostd/seed.c hostd/api.c hostd/machine.c hostd/machine_json.c hostd/memimage.c \
               hostd/reconcile.c hostd/image.c \
               hostd/gwkey.c hostd/sshkey.c hostd/egress.c hostd/net.c hostd/net_rules.c hostd/checkpoint.c hostd/template.c hostd/userkeys.c hostd/sessions.c \
               hostd/transfer.c hostd/zmem.c hostd/billing.c hostd/usage.c hostd/sampler.c \
               hostd/prometheus.c \
               hostd/idle.c hostd/tokens.c hostd/desktop.c hostd/keyproof.c hostd/quota.c \
               hostd/exec.c hostd/files.c
CLI_SRC     := cli/main.c cli/cli.c cli/client.c cli/up.c cli/image.c cli/usage.c \
               cli/token.c cli/info.c cli/key.c cli/machine.c cli/cp.c cli/template.c
SSHGW_SRC   := sshgw/main.c sshgw/proxy.c sshgw/pool.c sshgw/algos.c
WEB_SRC     := web/main.c web/proxy.c web/reply.c web/request.c web/upgrade.c web/ws.c \
               web/wsexec.c web/conns.c
DESKTOP_SRC := desktop/main.c desktop/screen.c desktop/hostfd.c desktop/font.c \
               desktop/vdagent.c desktop/request.c
# The credential broker's privileged half (hostd/secrets.h) and berth-web's
# descriptors (hostd/webctl.h).
HOSTD_SRC   += hostd/secrets.c hostd/secrets_rules.c hostd/webctl.c hostd/callcap.c
CLI_SRC     += cli/secret.c
# Lifecycle-event webhooks (hostd/webhooks.h) and berth webhook.
HOSTD_SRC   += hostd/webhooks.c
CLI_SRC     += cli/webhook.c
WEB_SRC     += web/broker.c web/hostctl.c
# Previews: hostd's half (the table, webctl's ops), the CLI, berth-web's
# proxy to the guests' ports and its reader of their answers.
HOSTD_SRC   += hostd/preview.c hostd/events.c
CLI_SRC     += cli/preview.c cli/events.c cli/mcp.c
# The MCP server's tools (common/mcp.h), once for its two transports: the
# CLI's stdio (cli/mcp.c) and berth-web's POST /mcp (web/mcp.c).
CLI_SRC     += common/mcp.c
WEB_SRC     += common/mcp.c
WEB_SRC     += web/preview.c web/upstream.c web/mcp.c
# E2B's data plane (envd) on berth-web: web/envd.h.
WEB_SRC     += web/envd.c web/multipart.c
# E2B's control plane: a machine's deadline, metadata and env (hostd), the
# API on api.DOMAIN (berth-web).
HOSTD_SRC   += hostd/attrs.c
WEB_SRC     += web/e2b.c
UNIT_SRC    := $(wildcard tests/unit/test_*.c)

# Objects shared by the daemon and the unit tests (everything but main).
LIB_SRC     := $(COMMON_SRC) $(STORAGE_SRC) $(filter-out hostd/main.c,$(HOSTD_SRC))

obj = $(patsubst %.c,$(OUT)/obj/%.o,$(1))

PROGS := $(BIN)/berth-hostd $(BIN)/berth $(BIN)/berth-sshgw $(BIN)/berth-desktop \
         $(BIN)/berth-web
UNITS := $(patsubst tests/unit/%.c,$(OUT)/tests/%,$(UNIT_SRC))
BENCHES := $(OUT)/bench/ledger_bench

all: $(PROGS) $(UNITS) $(BENCHES)

# The programs alone (deploy/install.sh builds these).
progs: $(PROGS)

$(OUT)/obj/%.o: %.c
	$(call quiet,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BIN)/berth-hostd: $(call obj,hostd/main.c $(LIB_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/berth-sshgw: $(call obj,$(SSHGW_SRC) $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/berth-desktop: $(call obj,$(DESKTOP_SRC) $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(VNC_LIBS) $(LDLIBS)

$(BIN)/berth-web: $(call obj,$(WEB_SRC) $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/berth: $(call obj,$(CLI_SRC) $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(OUT)/bench/%: $(call obj,bench/%.c $(LIB_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The bridge's vdagent parser is tested on its own (no hostd, no libvnc).
$(OUT)/tests/test_vdagent: $(call obj,tests/unit/test_vdagent.c desktop/vdagent.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's WebSocket frames and exec sessions (web/ws.c, web/wsexec.c)
# likewise.
$(OUT)/tests/test_ws: $(call obj,tests/unit/test_ws.c web/ws.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(OUT)/tests/test_wsexec: $(call obj,tests/unit/test_wsexec.c web/wsexec.c web/ws.c web/upgrade.c \
			   $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's previews, without hostd's objects.
$(OUT)/tests/test_web_preview: $(call obj,tests/unit/test_web_preview.c web/preview.c \
				web/upstream.c web/hostctl.c web/reply.c web/conns.c web/request.c \
				web/upgrade.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's /mcp (its Origin rule) and the MCP server's methods.
$(OUT)/tests/test_web_mcp: $(call obj,tests/unit/test_web_mcp.c web/mcp.c common/mcp.c web/reply.c \
			    web/request.c web/wsexec.c web/ws.c web/upgrade.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's E2B API's pure pieces (preview_label_of is preview.c's).
$(OUT)/tests/test_e2b: $(call obj,tests/unit/test_e2b.c web/e2b.c web/preview.c \
			web/upstream.c web/hostctl.c web/reply.c web/conns.c web/request.c \
			web/upgrade.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's envd: its host, token and multipart pieces.
$(OUT)/tests/test_envd: $(call obj,tests/unit/test_envd.c web/envd.c web/multipart.c web/preview.c \
			web/upstream.c web/hostctl.c web/reply.c web/conns.c web/request.c \
			web/upgrade.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# berth-web's checks of a client's request head, on a libmicrohttpd of its own.
$(OUT)/tests/test_web_request: $(call obj,tests/unit/test_web_request.c web/request.c $(COMMON_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(OUT)/tests/%: $(call obj,tests/unit/%.c $(LIB_SRC))
	$(call quiet,LINK,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# ---- install ---------------------------------------------------------------
# PREFIX/bin: the four programs.  PREFIX/lib/berth/recipes: the image
# recipes; PREFIX/share/berth/{web,desktop,novnc,xterm}: the dashboard, the
# desktop page, noVNC and the terminal's xterm.js (its three files the page
# loads); PREFIX/share/doc/berth: README and docs/.  The
# programs find these beside themselves (BIN/../lib/berth/recipes,
# BIN/../share/berth/...), so any PREFIX works without configuration.
# UNITDIR: the systemd units, their paths rewritten for PREFIX and
# SYSCONFDIR.  SYSCONFDIR/berth/berth.conf: deploy/berth.conf when there is
# none (never overwritten).  Nothing goes in /var/lib/berth (hostd makes
# it) and uninstall never touches it: machines' disks and the database.
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= /etc/systemd/system
NOVNC      ?= build/node/node_modules/@novnc/novnc
XTERM      ?= build/node/node_modules/@xterm
BINDIR      = $(PREFIX)/bin
RECIPEDIR   = $(PREFIX)/lib/berth/recipes
SHAREDIR    = $(PREFIX)/share/berth
DOCDIR      = $(PREFIX)/share/doc/berth
UNIT_FILES := $(wildcard deploy/systemd/*.service)
UNIT_NAMES := $(notdir $(UNIT_FILES))
D           = $(DESTDIR)

install: $(PROGS)
	$(Q)test -f $(NOVNC)/core/rfb.js || { echo "make install: no noVNC in $(NOVNC)" \
		"(deploy/install-deps.sh run fetches it; or NOVNC=DIR)" >&2; exit 1; }
	$(Q)test -f $(XTERM)/xterm/lib/xterm.js || { echo "make install: no xterm.js in $(XTERM)" \
		"(deploy/install-deps.sh run fetches it; or XTERM=DIR)" >&2; exit 1; }
	$(call quiet,INSTALL,$(D)$(PREFIX))
	$(Q)install -d $(D)$(BINDIR) $(D)$(RECIPEDIR) $(D)$(SHAREDIR)/web \
		$(D)$(SHAREDIR)/desktop $(D)$(DOCDIR) $(D)$(UNITDIR) $(D)$(SYSCONFDIR)/berth
	$(Q)install -m 0755 $(PROGS) $(D)$(BINDIR)/
	$(Q)rm -rf $(D)$(RECIPEDIR) $(D)$(SHAREDIR)/novnc $(D)$(SHAREDIR)/xterm
	$(Q)cp -R images/recipes $(D)$(RECIPEDIR)
	$(Q)cp -R $(NOVNC) $(D)$(SHAREDIR)/novnc
	$(Q)install -d $(D)$(SHAREDIR)/xterm/xterm/lib $(D)$(SHAREDIR)/xterm/xterm/css \
		$(D)$(SHAREDIR)/xterm/addon-fit/lib
	$(Q)install -m 0644 $(XTERM)/xterm/lib/xterm.js $(D)$(SHAREDIR)/xterm/xterm/lib/
	$(Q)install -m 0644 $(XTERM)/xterm/css/xterm.css $(D)$(SHAREDIR)/xterm/xterm/css/
	$(Q)install -m 0644 $(XTERM)/xterm/LICENSE $(D)$(SHAREDIR)/xterm/xterm/
	$(Q)install -m 0644 $(XTERM)/addon-fit/lib/addon-fit.js $(D)$(SHAREDIR)/xterm/addon-fit/lib/
	$(Q)install -m 0644 $(XTERM)/addon-fit/LICENSE $(D)$(SHAREDIR)/xterm/addon-fit/
	$(Q)chmod -R u=rwX,go=rX $(D)$(RECIPEDIR) $(D)$(SHAREDIR)/novnc $(D)$(SHAREDIR)/xterm
	$(Q)install -m 0644 web/page/* $(D)$(SHAREDIR)/web/
	$(Q)install -m 0644 desktop/page/* $(D)$(SHAREDIR)/desktop/
	$(Q)install -m 0644 README.md docs/*.md $(D)$(DOCDIR)/
	$(Q)for u in $(UNIT_NAMES); do \
		sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|/etc/berth/|$(SYSCONFDIR)/berth/|g' \
			deploy/systemd/$$u > $(D)$(UNITDIR)/$$u.tmp && \
		chmod 0644 $(D)$(UNITDIR)/$$u.tmp && mv $(D)$(UNITDIR)/$$u.tmp $(D)$(UNITDIR)/$$u || exit 1; \
	done
	$(Q)test -e $(D)$(SYSCONFDIR)/berth/berth.conf || \
		install -m 0644 deploy/berth.conf $(D)$(SYSCONFDIR)/berth/berth.conf

# What install put there.  The units are stopped and disabled first when
# systemd runs this host (no DESTDIR); berth.conf goes only when it is
# still deploy/berth.conf.
uninstall:
	$(Q)if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then \
		systemctl disable --now $(UNIT_NAMES) 2>/dev/null; systemctl daemon-reload; fi; true
	$(call quiet,RM,$(D)$(PREFIX))
	$(Q)rm -f $(addprefix $(D)$(BINDIR)/,$(notdir $(PROGS))) $(addprefix $(D)$(UNITDIR)/,$(UNIT_NAMES))
	$(Q)rm -rf $(D)$(PREFIX)/lib/berth $(D)$(SHAREDIR) $(D)$(DOCDIR)
	$(Q)if cmp -s deploy/berth.conf $(D)$(SYSCONFDIR)/berth/berth.conf; then \
		rm -f $(D)$(SYSCONFDIR)/berth/berth.conf; \
		rmdir $(D)$(SYSCONFDIR)/berth 2>/dev/null; \
	elif [ -e $(D)$(SYSCONFDIR)/berth/berth.conf ]; then \
		echo "make uninstall: kept $(D)$(SYSCONFDIR)/berth/berth.conf (changed)"; fi; true

# systemd-analyze verify on every unit as installed: into a scratch root
# (DESTDIR, default PREFIX) that also holds the host's own units, since
# verify --root looks up sysinit.target and the rest there, and the
# binaries at their ExecStart paths.  Any message fails: verify exits 0
# on unknown keys and bad values, which it only prints.
verify-units: $(PROGS)
	$(Q)bash tests/verify-units.sh

# libFuzzer harnesses (tests/fuzz/NAME.c, tests/fuzz/README), with clang,
# apart from the gcc build: the project's real sources compiled for
# coverage with ASan and UBSan, one program per harness, build/fuzz/NAME.
FUZZ_CC     ?= clang
FUZZ_OUT    := build/fuzz
FUZZ_SRC    := $(wildcard tests/fuzz/*.c)
FUZZ_NAMES  := $(basename $(notdir $(FUZZ_SRC)))
FUZZ_PROGS  := $(addprefix $(FUZZ_OUT)/,$(FUZZ_NAMES))
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE $(filter-out -Wformat-truncation,$(WARN)) -I. -MMD -MP \
               $(shell pkg-config --cflags $(PKGS) 2>/dev/null) \
               -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN)
FUZZ_LIB    := $(patsubst %.c,$(FUZZ_OUT)/obj/%.o,$(LIB_SRC) desktop/vdagent.c desktop/request.c \
               web/ws.c web/upstream.c web/multipart.c)
# The E2B API's harness takes web/e2b.c and what it links with (berth-web's
# previews for preview_label_of); the others need none of it.
FUZZ_E2B    := $(patsubst %.c,$(FUZZ_OUT)/obj/%.o,web/e2b.c web/preview.c web/hostctl.c \
               web/reply.c web/conns.c web/request.c web/upgrade.c)
$(FUZZ_OUT)/e2b_query: $(FUZZ_E2B)
FUZZ_SECONDS ?= 60

$(FUZZ_OUT)/obj/tests/fuzz/%.o: tests/fuzz/%.c
	$(call quiet,CLANG,$<)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -c -o $@ $<

$(FUZZ_OUT)/obj/%.o: %.c
	$(call quiet,CLANG,$<)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_OUT)/%: $(FUZZ_OUT)/obj/tests/fuzz/%.o $(FUZZ_LIB)
	$(call quiet,LINK,$@)
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)

fuzz-build: $(FUZZ_PROGS)

# Each harness for FUZZ_SECONDS on a copy of its corpus (new inputs stay in
# build/fuzz/corpus/NAME, out of git); FUZZ=NAME for one.
fuzz: fuzz-build
	$(Q)FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run --long $(FUZZ)

deps:
	$(Q)sh deploy/install-deps.sh test

# The two commands.  Both install what is missing first.
run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)./bin/berth up --state $(or $(STATE),/var/lib/berth) --ssh-port $(or $(SSH_PORT),2222)

test: deps
	$(Q)$(MAKE) --no-print-directory all fuzz-build
	$(Q)bash tests/run

asan: deps
	$(Q)$(MAKE) --no-print-directory SANITIZE=1 all

test-asan: asan
	$(Q)$(MAKE) --no-print-directory fuzz-build
	$(Q)BERTH_BIN=build/asan/bin BERTH_UNIT=build/asan/tests bash tests/run

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)bash bench/run

clean:
	rm -rf bin build

.PHONY: all progs deps run test asan test-asan bench clean install uninstall verify-units \
	fuzz fuzz-build
.SECONDARY:

-include $(shell find build -name '*.d' 2>/dev/null)
