/* The image catalog: images built by a recipe (images/recipes/NAME.sh) and
 * their base volumes.  Kernel and initrd of direct-boot images are kept in
 * STATE/images/NAME/. */
#ifndef BERTH_IMAGE_H
#define BERTH_IMAGE_H

#include <jansson.h>

#include "hostd/hostd.h"

/* Build image NAME with RECIPE (a DNS label naming RECIPES_DIR/RECIPE.sh)
 * and register it.  409 when NAME exists; on failure nothing is left. */
int image_build(struct hostd *h, const char *recipe, const char *name,
		struct image *out, struct err *e);
/* Remove image NAME; 409 while machines use it. */
int image_delete(struct hostd *h, const char *name, struct err *e);
json_t *image_json(struct hostd *h, const struct image *img);
/* Remove image directories that no catalog row names. */
void image_reconcile(struct hostd *h);

#endif
