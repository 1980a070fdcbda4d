#include "hostd/seed.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/run.h"
#include "common/util.h"
#include "common/banned.h"

static bool clean_value(const char *s)
{
	return *s && strpbrk(s, "\r\n\"'\\") == NULL;
}

/* OpenSSH PEM text: base64 lines between BEGIN and END lines, nothing a
 * YAML block could read otherwise. */
static bool pem_ok(const char *s)
{
	return strncmp(s, "-----BEGIN OPENSSH PRIVATE KEY-----\n", 36) == 0 &&
	       strstr(s, "-----END OPENSSH PRIVATE KEY-----") != NULL &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=- \n") ==
		       strlen(s);
}

int seed_render(const struct seed *s, struct buf *meta, struct buf *user,
		struct err *e)
{
	if (!name_valid(s->hostname))
		return err_set(e, 400, "invalid_name", "seed: invalid hostname '%s'", s->hostname);
	if (!clean_value(s->instance_id) || !clean_value(s->user))
		return err_set(e, 400, "invalid_seed", "seed: invalid instance id or user");
	for (size_t i = 0; s->keys && s->keys[i]; i++)
		if (!clean_value(s->keys[i]))
			return err_set(e, 400, "invalid_key",
				       "seed: public key %zu has a newline or a quote", i + 1);
	if (s->host_key_private &&
	    (!pem_ok(s->host_key_private) || !s->host_key_public ||
	     !clean_value(s->host_key_public)))
		return err_set(e, 400, "invalid_key", "seed: the host key is not an OpenSSH key");
	/* Every value quoted: YAML reads a bare 1234, 0123, yes or null as
	 * something other than a string, and a ": " in a key's comment as a
	 * mapping.  Single quotes need no escaping: values never hold one. */
	buf_printf(meta, "instance-id: '%s'\nlocal-hostname: '%s'\n", s->instance_id, s->hostname);
	/* manage_etc_hosts: /etc/hosts names the machine (sudo resolves its
	 * own hostname). */
	buf_printf(user, "#cloud-config\nhostname: '%s'\nmanage_etc_hosts: true\n"
		   "ssh_authorized_keys:\n", s->hostname);
	for (size_t i = 0; s->keys && s->keys[i]; i++)
		buf_printf(user, "  - '%s'\n", s->keys[i]);
	/* The machine's own host key (cloud-init's cc_ssh writes it to
	 * /etc/ssh/ssh_host_ed25519_key{,.pub}), which hostd pins. */
	if (s->host_key_private) {
		buf_adds(user, "ssh_keys:\n  ed25519_private: |\n");
		for (const char *l = s->host_key_private; *l;) {
			size_t n = strcspn(l, "\n");
			if (n)
				buf_printf(user, "    %.*s\n", (int)n, l);
			l += n + (l[n] == '\n');
		}
		buf_printf(user, "  ed25519_public: '%s'\n", s->host_key_public);
	}
	/* For cloud images whose default user is not root (cloud-init's
	 * "users" module): the same keys for that user, passwordless sudo. */
	if (strcmp(s->user, "root") != 0) {
		buf_printf(user, "users:\n  - name: '%s'\n    sudo: 'ALL=(ALL) NOPASSWD:ALL'\n"
			   "    shell: /bin/bash\n    ssh_authorized_keys:\n", s->user);
		for (size_t i = 0; s->keys && s->keys[i]; i++)
			buf_printf(user, "      - '%s'\n", s->keys[i]);
	}
	return 0;
}

int seed_write(const struct seed *s, const char *dir, struct err *e)
{
	struct buf meta = BUF_INIT, user = BUF_INIT;
	char meta_path[PATH_MAX], user_path[PATH_MAX], iso[PATH_MAX], part[PATH_MAX];
	int rc = -1;

	snprintf(meta_path, sizeof(meta_path), "%s/meta-data", dir);
	snprintf(user_path, sizeof(user_path), "%s/user-data", dir);
	snprintf(iso, sizeof(iso), "%s/seed.iso", dir);
	snprintf(part, sizeof(part), "%s/seed.iso.part", dir);
	if (seed_render(s, &meta, &user, e) < 0)
		goto out;
	if (file_write_atomic(meta_path, meta.data, meta.len, 0600, e) < 0 ||
	    file_write_atomic(user_path, user.data, user.len, 0600, e) < 0)
		goto out;
	char *const argv[] = { "genisoimage", "-quiet", "-output", part,
			       "-volid", "cidata", "-joliet", "-rock",
			       user_path, meta_path, NULL };
	if (run_argv(argv, NULL, e) < 0)
		goto out;
	int fd = open(part, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0) {
		err_errno(e, errno, "sync %s", part);
		if (fd >= 0)
			close(fd);
		goto out;
	}
	close(fd);
	if (rename(part, iso) < 0) {
		err_errno(e, errno, "rename %s", part);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		unlink(part);
	buf_free(&meta);
	buf_free(&user);
	return rc;
}
