/* A tiny 5x7 bitmap font for the bridge's own frames ("waking NAME...",
 * "NAME stopped"): lower-case letters, digits, '-', '.' and space, what
 * machine names are made of. */
#ifndef BERTH_DESKTOP_FONT_H
#define BERTH_DESKTOP_FONT_H

#include <stdint.h>

/* Draw TEXT into the 32-bit frame FB (W x H pixels) centred, each font
 * pixel SCALE x SCALE, in PIXEL; characters it lacks are drawn as spaces
 * and the text is clipped to the frame. */
void font_draw_centred(uint32_t *fb, int w, int h, const char *text, int scale,
		       uint32_t pixel);

#endif
