/* hostd's HTTP listener (config http_listen, default 127.0.0.1:8080;
 * HTTPS when tls_cert and tls_key are set): the dashboard's files from
 * web_dir at /, and every /v1 route of the API (hostd/api.c) for callers
 * with an API token (`Authorization: Bearer TOKEN`), acting as the token's
 * user, never as root, without the gateway routes.  libmicrohttpd, one
 * thread per connection, as on the UNIX socket. */
#ifndef BERTH_HTTP_H
#define BERTH_HTTP_H

#include "hostd/hostd.h"

struct http;

/* Start listening as H's config says; *OUT is NULL when http_listen is ""
 * (off), or when the default address is taken (logged: another hostd on
 * this machine serves it).  Sets H->dashboard_url.  -1 with E set on a bad
 * address, unreadable certificate or key, a libmicrohttpd without TLS, or
 * a configured address that cannot be bound. */
int http_start(struct hostd *h, struct http **out, struct err *e);
void http_stop(struct http *x);

/* Split LISTEN ("ADDR:PORT", "[V6ADDR]:PORT"; numeric only) into a socket
 * address.  400 "invalid_config" naming the value. */
struct sockaddr_storage;
int http_parse_listen(const char *listen, struct sockaddr_storage *ss, unsigned *sslen,
		      struct err *e);

#endif
