#!/bin/bash
# Build berth's "tiny-fb" image: the tiny test guest (tiny.sh, which
# documents it) with a 1280x800 graphical framebuffer, /dev/fb0 by the bochs
# DRM driver on QEMU's std VGA.  For bench/desktop.py --fb.
#
#   images/recipes/tiny-fb.sh OUTDIR
#
# `berth image build tiny-fb`.  A recipe of its own because hostd passes a
# recipe no environment but BERTH_CACHE.
set -euo pipefail
export BERTH_TINY_FB=1
exec bash "$(dirname -- "${BASH_SOURCE[0]}")/tiny.sh" "$@"
