#!/bin/bash
# Build berth's "agents-desktop" image: the agents image (agents.sh, which
# documents both) plus a light graphical session on the VM's display: Xfce,
# with the user agent logged in automatically by lightdm (no greeter shown),
# on Xorg with the modesetting driver on the VM's VGA device (bochs-drm).
# The machine boots to graphical.target; SSH, the seed and everything else
# are the agents image's.
#
#   images/recipes/agents-desktop.sh OUTDIR
#
# `berth image build agents-desktop`.  The same caches as agents.sh
# ($BERTH_CACHE/agents/); BERTH_AGENTS_RAW and the other variables of
# agents.sh apply.
set -euo pipefail
export BERTH_AGENTS_FLAVOUR=desktop
exec bash "$(dirname -- "${BASH_SOURCE[0]}")/agents.sh" "$@"
