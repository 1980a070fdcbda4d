/*
 * fbflip: show whole frames on the guest's display in turn by page flipping,
 * for bench/desktop.py's 1280x800 part.  Runs inside the tiny-fb guest
 * (bochs DRM driver on QEMU's std VGA).
 *
 *   fbflip [-r RATE] [-c COUNTFILE]
 *
 * Three frames (black, white, grey: every pixel differs between any two;
 * the screen's size, 32 bpp) are drawn once into three KMS dumb buffers in
 * video memory; then, RATE times a second (default 60), the CRTC is pointed
 * at the next one.  Three, not two: QEMU looks at the screen about every
 * 30 ms, and two flips between looks would bring back the frame it saw.
 * And before each flip the number of the flip is written into the first
 * 32 pixels of the frame about to be shown (red and blue bits): QEMU adds
 * 50 ms to its refresh interval at every look that finds nothing changed,
 * and three frames at 60 flips/s repeat every 50 ms, so once its interval
 * was a multiple of 50 ms every look found the frame it had seen and the
 * interval grew to 3 s (0.3 screens/s in some runs).  Every shown frame
 * now differs from every earlier one.  On bochs that is a
 * write of the display start register, so every refresh QEMU shows a
 * complete new frame while the guest spends almost no CPU: what is measured
 * is the display path (QEMU's VGA, its VNC server, berth-desktop, the
 * viewer), not how fast TCG copies 4 MB (writing the frames with `cat` to
 * /dev/fb0 is the benchmark's other mode).  After each flip the number of
 * flips so far is written at the start of COUNTFILE.  SIGTERM or SIGINT
 * puts the console's framebuffer back and exits 0.
 *
 * Built static by tiny.sh (the guest has no libc but busybox's); the KMS
 * structures and ioctl numbers are the kernel's stable UAPI
 * (include/uapi/drm/drm.h, drm_mode.h), written out here so the build
 * needs no libdrm headers.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct drm_mode_modeinfo {
	uint32_t clock;
	uint16_t hdisplay, hsync_start, hsync_end, htotal, hskew;
	uint16_t vdisplay, vsync_start, vsync_end, vtotal, vscan;
	uint32_t vrefresh;
	uint32_t flags;
	uint32_t type;
	char name[32];
};

struct drm_mode_card_res {
	uint64_t fb_id_ptr;
	uint64_t crtc_id_ptr;
	uint64_t connector_id_ptr;
	uint64_t encoder_id_ptr;
	uint32_t count_fbs;
	uint32_t count_crtcs;
	uint32_t count_connectors;
	uint32_t count_encoders;
	uint32_t min_width, max_width;
	uint32_t min_height, max_height;
};

struct drm_mode_crtc {
	uint64_t set_connectors_ptr;
	uint32_t count_connectors;
	uint32_t crtc_id;
	uint32_t fb_id;
	uint32_t x, y;
	uint32_t gamma_size;
	uint32_t mode_valid;
	struct drm_mode_modeinfo mode;
};

struct drm_mode_fb_cmd {
	uint32_t fb_id;
	uint32_t width, height;
	uint32_t pitch;
	uint32_t bpp;
	uint32_t depth;
	uint32_t handle;
};

struct drm_mode_create_dumb {
	uint32_t height, width;
	uint32_t bpp;
	uint32_t flags;
	uint32_t handle;
	uint32_t pitch;
	uint64_t size;
};

struct drm_mode_map_dumb {
	uint32_t handle;
	uint32_t pad;
	uint64_t offset;
};

#define DRM_IOWR_(nr, type) _IOWR('d', nr, type)
#define DRM_IOCTL_SET_MASTER _IO('d', 0x1e)
#define DRM_IOCTL_MODE_GETRESOURCES DRM_IOWR_(0xA0, struct drm_mode_card_res)
#define DRM_IOCTL_MODE_GETCRTC DRM_IOWR_(0xA1, struct drm_mode_crtc)
#define DRM_IOCTL_MODE_SETCRTC DRM_IOWR_(0xA2, struct drm_mode_crtc)
#define DRM_IOCTL_MODE_ADDFB DRM_IOWR_(0xAE, struct drm_mode_fb_cmd)
#define DRM_IOCTL_MODE_CREATE_DUMB DRM_IOWR_(0xB2, struct drm_mode_create_dumb)
#define DRM_IOCTL_MODE_MAP_DUMB DRM_IOWR_(0xB3, struct drm_mode_map_dumb)

/* With fbcon's own, four whole 1280x800 frames fill the 16 MiB of video
 * memory libvirt gives the std VGA. */
static const uint32_t colours[] = { 0x00000000, 0x00ffffff, 0x00808080 };
#define NFRAMES (sizeof(colours) / sizeof(colours[0]))

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "fbflip: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The first CRTC, with the mode and framebuffer it shows now (fbcon's), and
 * the first connector: bochs has one of each. */
static void find_output(int fd, struct drm_mode_crtc *crtc, uint32_t *connector)
{
	struct drm_mode_card_res res = { 0 };
	uint32_t crtcs[8], conns[8];

	if (ioctl(fd, DRM_IOCTL_MODE_GETRESOURCES, &res) < 0)
		die("DRM_IOCTL_MODE_GETRESOURCES");
	if (res.count_crtcs == 0 || res.count_connectors == 0) {
		fprintf(stderr, "fbflip: the display has no CRTC or no connector\n");
		exit(1);
	}
	/* Ask again for the ids only (at most 8 of each). */
	res = (struct drm_mode_card_res){
		.crtc_id_ptr = (uintptr_t)crtcs,
		.count_crtcs = res.count_crtcs < 8 ? res.count_crtcs : 8,
		.connector_id_ptr = (uintptr_t)conns,
		.count_connectors = res.count_connectors < 8 ? res.count_connectors : 8,
	};
	if (ioctl(fd, DRM_IOCTL_MODE_GETRESOURCES, &res) < 0)
		die("DRM_IOCTL_MODE_GETRESOURCES");
	memset(crtc, 0, sizeof(*crtc));
	crtc->crtc_id = crtcs[0];
	if (ioctl(fd, DRM_IOCTL_MODE_GETCRTC, crtc) < 0)
		die("DRM_IOCTL_MODE_GETCRTC");
	if (!crtc->mode_valid) {
		fprintf(stderr, "fbflip: CRTC %u shows nothing (no mode set)\n", crtc->crtc_id);
		exit(1);
	}
	*connector = conns[0];
}

/* A dumb buffer of the mode's size, filled with one 32-bit pixel value,
 * registered as a framebuffer; returns its id, and in *MAPPED the buffer,
 * mapped. */
static uint32_t make_frame(int fd, const struct drm_mode_modeinfo *m, uint32_t pixel,
			   uint32_t **mapped)
{
	struct drm_mode_create_dumb cd = { .width = m->hdisplay, .height = m->vdisplay, .bpp = 32 };
	struct drm_mode_fb_cmd fb = { 0 };
	struct drm_mode_map_dumb map = { 0 };
	uint32_t *p;

	if (ioctl(fd, DRM_IOCTL_MODE_CREATE_DUMB, &cd) < 0)
		die("DRM_IOCTL_MODE_CREATE_DUMB");
	fb = (struct drm_mode_fb_cmd){ .width = cd.width, .height = cd.height, .pitch = cd.pitch,
				       .bpp = 32, .depth = 24, .handle = cd.handle };
	if (ioctl(fd, DRM_IOCTL_MODE_ADDFB, &fb) < 0)
		die("DRM_IOCTL_MODE_ADDFB");
	map.handle = cd.handle;
	if (ioctl(fd, DRM_IOCTL_MODE_MAP_DUMB, &map) < 0)
		die("DRM_IOCTL_MODE_MAP_DUMB");
	p = mmap(NULL, cd.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map.offset);
	if (p == MAP_FAILED)
		die("mmap of a dumb buffer");
	for (size_t i = 0; i < cd.size / 4; i++)
		p[i] = pixel;
	*mapped = p;
	return fb.fb_id;
}

static int show(int fd, struct drm_mode_crtc *crtc, uint32_t *connector, uint32_t fb_id)
{
	struct drm_mode_crtc set = *crtc;

	set.fb_id = fb_id;
	set.x = set.y = 0;
	set.set_connectors_ptr = (uintptr_t)connector;
	set.count_connectors = 1;
	return ioctl(fd, DRM_IOCTL_MODE_SETCRTC, &set);
}

int main(int argc, char **argv)
{
	const char *countfile = NULL;
	double rate = 60;
	struct drm_mode_crtc crtc;
	uint32_t connector, frames[NFRAMES], *maps[NFRAMES];
	struct timespec next;
	struct sigaction sa = { .sa_handler = on_signal };
	long period_ns;
	unsigned long n = 0;
	int fd, cfd = -1, c;

	while ((c = getopt(argc, argv, "r:c:")) != -1) {
		switch (c) {
		case 'r':
			rate = strtod(optarg, NULL);
			if (!(rate > 0 && rate <= 1000)) {
				fprintf(stderr, "fbflip: -r wants a rate in flips/s, 0 < RATE <= 1000, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'c':
			countfile = optarg;
			break;
		default:
			fprintf(stderr, "usage: fbflip [-r RATE] [-c COUNTFILE]\n");
			return 2;
		}
	}
	fd = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("/dev/dri/card0");
	/* The first opener is master already unless another program is. */
	if (ioctl(fd, DRM_IOCTL_SET_MASTER, 0) < 0 && errno != EINVAL)
		die("DRM_IOCTL_SET_MASTER");
	if (countfile) {
		cfd = open(countfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (cfd < 0)
			die(countfile);
	}
	find_output(fd, &crtc, &connector);
	for (size_t i = 0; i < NFRAMES; i++)
		frames[i] = make_frame(fd, &crtc.mode, colours[i], &maps[i]);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	period_ns = (long)(1e9 / rate);
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!stop) {
		for (int bit = 0; bit < 32; bit++)
			maps[n % NFRAMES][bit] = (n + 1) >> bit & 1 ? 0x00ff0000 : 0x000000ff;
		if (show(fd, &crtc, &connector, frames[n % NFRAMES]) < 0) {
			if (errno == EINTR)
				continue;
			die("DRM_IOCTL_MODE_SETCRTC");
		}
		n++;
		if (cfd >= 0) {
			char num[32];
			int len = snprintf(num, sizeof(num), "%lu\n", n);

			/* The count only grows, so no shorter text is left behind. */
			if (pwrite(cfd, num, (size_t)len, 0) != len)
				die(countfile);
		}
		next.tv_nsec += period_ns;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
	}
	/* Back to the console's framebuffer (the kernel would restore it when
	 * this file closes, too). */
	if (crtc.fb_id && show(fd, &crtc, &connector, crtc.fb_id) < 0)
		fprintf(stderr, "fbflip: restoring the console: %s\n", strerror(errno));
	printf("fbflip: %lu flips\n", n);
	return 0;
}
