/*
 * Unit tests of the previews' names (hostd/preview.h): ports, the label
 * PORT-NAME-OWNER and its limits, the URLs berth prints.
 */
#include <stdio.h>
#include <string.h>

#include "hostd/config.h"
#include "hostd/preview.h"
#include "tests/unit/tap.h"

static void test_port(void)
{
	struct err e = { 0 };
	int port = 0;

	check(preview_port_parse("8080", &port, &e) == 0 && port == 8080, "port 8080");
	check(preview_port_parse("1", &port, &e) == 0 && port == 1, "port 1");
	check(preview_port_parse("65535", &port, &e) == 0 && port == 65535, "port 65535");
	const char *bad[] = { "0", "65536", "08080", "", "80a", "-1", "999999", " 80", NULL };
	for (int i = 0; bad[i]; i++) {
		err_clear(&e);
		check(preview_port_parse(bad[i], &port, &e) < 0 && e.status == 400 &&
		      !strcmp(e.code, "invalid_port"), "bad port '%s': 400 invalid_port", bad[i]);
	}
}

static void test_label(void)
{
	struct err e = { 0 };
	char l[64], name[64];

	check(preview_label("alice", "devbox", 8080, l, sizeof(l), &e) == 0 &&
	      !strcmp(l, "8080-devbox-alice"), "label: PORT-NAME-OWNER");
	check(preview_label("b-c", "a", 3000, l, sizeof(l), &e) == 0 && !strcmp(l, "3000-a-b-c"),
	      "label: dashes in both names");
	const char *owners[] = { "Alice", "al_ice", "al.ice", "uid1000x", NULL };
	for (int i = 0; owners[i]; i++) {
		err_clear(&e);
		int rc = preview_label(owners[i], "m", 80, l, sizeof(l), &e);
		if (i < 3)
			check(rc < 0 && e.status == 409 && !strcmp(e.code, "owner_not_a_host_name"),
			      "owner '%s' is no host name's label: 409", owners[i]);
		else
			check(rc == 0, "owner '%s' is one", owners[i]);
	}
	memset(name, 'm', 54);
	name[54] = '\0';
	err_clear(&e);
	check(preview_label("bob", name, 65535, l, sizeof(l), &e) < 0 &&
	      !strcmp(e.code, "label_too_long"), "64 characters: label_too_long");
	name[53] = '\0';
	check(preview_label("bob", name, 65535, l, sizeof(l), &e) == 0 && strlen(l) == 63,
	      "63 characters are a label");
}

static void test_url(void)
{
	struct config c;
	char u[256];

	config_defaults(&c, "/tmp/x");
	snprintf(c.http_listen, sizeof(c.http_listen), "127.0.0.1:8080");
	preview_url(&c, "8080-m-alice", "/", u, sizeof(u));
	check(!strcmp(u, "http://8080-m-alice.localhost:8080/"), "url over HTTP: %s", u);
	preview_url(&c, "8080-m-alice", PREVIEW_LOGIN_PATH "?token=ab", u, sizeof(u));
	check(!strcmp(u, "http://8080-m-alice.localhost:8080/__berth/login?token=ab"),
	      "the link's url: %s", u);
	snprintf(c.http_listen, sizeof(c.http_listen), "0.0.0.0:443");
	snprintf(c.tls_cert, sizeof(c.tls_cert), "/etc/x.pem");
	snprintf(c.preview_domain, sizeof(c.preview_domain), "preview.example.com");
	preview_url(&c, "3000-web-bob", "/", u, sizeof(u));
	check(!strcmp(u, "https://3000-web-bob.preview.example.com/"),
	      "url over HTTPS on 443: no port: %s", u);
	snprintf(c.http_listen, sizeof(c.http_listen), "[::]:8443");
	preview_url(&c, "3000-web-bob", "/", u, sizeof(u));
	check(!strcmp(u, "https://3000-web-bob.preview.example.com:8443/"),
	      "url on another port: %s", u);
}

static void test_domain(void)
{
	struct config c;
	struct err e = { 0 };
	const char *good[] = { "localhost", "preview.example.com", "a-b.c0", NULL };
	const char *bad[] = { "", "Example.com", "a..b", ".a", "a.", "-a.b", "a-.b", "a_b",
			      "a b", NULL };

	for (int i = 0; good[i]; i++) {
		config_defaults(&c, "/tmp/x");
		snprintf(c.preview_domain, sizeof(c.preview_domain), "%s", good[i]);
		err_clear(&e);
		check(config_check(&c, &e) == 0, "preview_domain = %s", good[i]);
	}
	for (int i = 0; bad[i]; i++) {
		config_defaults(&c, "/tmp/x");
		snprintf(c.preview_domain, sizeof(c.preview_domain), "%s", bad[i]);
		err_clear(&e);
		check(config_check(&c, &e) < 0 && strstr(e.msg, "preview_domain"),
		      "preview_domain = '%s' is refused", bad[i]);
	}
}

int main(void)
{
	test_port();
	test_label();
	test_url();
	test_domain();
	return tap_done("test_preview");
}
