/* The pure part of hostd/secrets.h: names, URLs, header lines, a guest's
 * call, and the script that writes the broker's variables in a machine. */
#include "hostd/secrets.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "common/banned.h"

bool secrets_name_valid(const char *s)
{
	return name_valid(s) && s[0] >= 'a' && s[0] <= 'z' && strcmp(s, "log") != 0;
}

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* RFC 9110's tchar: what a method or a header's name is made of. */
static bool is_tchar(char c)
{
	return is_alnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 3986's pchar but '%' (checked apart) and '/'. */
static bool is_path_char(char c)
{
	return is_alnum(c) || (c && strchr("-._~!$&'()*+,;=:@/", c));
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

/* Whether the LEN bytes at P are a "." or ".." segment, %2e spelling a
 * dot too. */
static bool dot_segment(const char *p, size_t len)
{
	size_t dots = 0, i = 0;

	while (i < len) {
		if (p[i] == '.') {
			i++;
		} else if (p[i] == '%' && i + 2 < len && p[i + 1] == '2' &&
			   lower(p[i + 2]) == 'e') {
			i += 3;
		} else {
			return false;
		}
		dots++;
	}
	return dots == 1 || dots == 2;
}

/* The path PATH (up to END: '?' or its end) has no dot segment, no
 * encoded '/' or '\\' (which an upstream may decode into one), and only
 * RFC 3986's characters, '%' followed by two hex digits. */
static bool path_sound(const char *path, const char *end)
{
	for (const char *p = path; p < end; p++) {
		if (*p == '%') {
			if (end - p < 3 || !strchr("0123456789abcdefABCDEF", p[1]) ||
			    !strchr("0123456789abcdefABCDEF", p[2]))
				return false;
			if (p[1] == '2' && lower(p[2]) == 'f')
				return false;
			if (p[1] == '5' && lower(p[2]) == 'c')
				return false;
		} else if (!is_path_char(*p)) {
			return false;
		}
	}
	for (const char *p = path; p < end;) {
		const char *q = p + 1;
		while (q < end && *q != '/')
			q++;
		if (dot_segment(p + 1, (size_t)(q - p - 1)))
			return false;
		p = q;
	}
	return true;
}

int secrets_url_check(const char *url, char *canon, size_t canonlen, struct err *e)
{
	const char *h, *p, *end;
	size_t len = strlen(url);
	/* Errors quote the URL up to a query or fragment, which may hold a
	 * key (never quoted: docs/api.md). */
	int shown = (int)(strcspn(url, "?#") < 100 ? strcspn(url, "?#") : 100);
	const char *more = url[shown] ? "…" : "";

	if (len > 500)
		return err_set(e, 400, "invalid_url", "the URL is longer than 500 bytes");
	if (strncasecmp(url, "https://", 8) != 0)
		return err_set(e, 400, "invalid_url", "the URL must be https:// (the broker "
			       "speaks TLS to the upstream, verified): '%.*s%s'", shown, url, more);
	for (p = url; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return err_set(e, 400, "invalid_url", "the URL must be printable ASCII "
				       "without spaces");
	h = url + 8;
	end = h + strcspn(h, "/?#");
	if (*end == '?' || *end == '#' || strpbrk(end, "?#"))
		return err_set(e, 400, "invalid_url", "the URL may have no query or fragment: "
			       "'%.*s%s'", shown, url, more);
	if (memchr(h, '@', (size_t)(end - h)))
		return err_set(e, 400, "invalid_url", "the URL may have no user or password: "
			       "put credentials in a header");
	/* The host: [IPv6], or a name or IPv4 address; then :PORT. */
	p = h;
	if (*p == '[') {
		while (++p < end && *p != ']')
			if (!strchr("0123456789abcdefABCDEF:.", *p))
				break;
		if (p >= end || *p != ']' || p == h + 1)
			return err_set(e, 400, "invalid_url", "the URL's host is not an IPv6 "
				       "address in brackets: '%.*s%s'", shown, url, more);
		p++;
	} else {
		const char *s = p;
		while (p < end && (is_alnum(*p) || *p == '-' || *p == '.'))
			p++;
		if (p == s || *s == '.' || *s == '-' || p[-1] == '-' || p - s > 253)
			return err_set(e, 400, "invalid_url", "the URL has no valid host: "
				       "'%.*s%s'", shown, url, more);
	}
	if (p < end && *p == ':') {
		long port = 0;
		const char *d = ++p;
		while (p < end && *p >= '0' && *p <= '9' && port <= 65535)
			port = port * 10 + (*p++ - '0');
		if (p == d || p != end || port < 1 || port > 65535)
			return err_set(e, 400, "invalid_url", "the URL's port must be 1 to 65535: "
				       "'%.*s%s'", shown, url, more);
	}
	if (p != end)
		return err_set(e, 400, "invalid_url", "the URL has no valid host: '%.*s%s'", shown,
			       url, more);
	if (!path_sound(end, end + strlen(end)))
		return err_set(e, 400, "invalid_url", "the URL's path has characters a URL may "
			       "not have, a '.' or '..' segment, or an encoded '/': '%.*s%s'", shown,
			       url, more);
	len = strlen(url);
	while (len > (size_t)(end - url) && url[len - 1] == '/')
		len--;
	if (len + 1 > canonlen)
		return err_set(e, 400, "invalid_url", "the URL is too long");
	/* The scheme and the host in lower case. */
	for (size_t i = 0; i < len; i++)
		canon[i] = url + i < end ? lower(url[i]) : url[i];
	canon[len] = '\0';
	return 0;
}

/* Headers the broker's own HTTP decides (framing, routing, the
 * connection), which a secret may not set. */
static const char *const reserved[] = {
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer",
	"upgrade", "expect", NULL,
};

int secrets_header_parse(const char *line, char *name, size_t namelen, char *value,
			 size_t valuelen, struct err *e)
{
	const char *colon = strchr(line, ':'), *v, *end;
	size_t nl;

	if (!colon)
		return err_set(e, 400, "invalid_header", "a header is 'Name: value' (no ':' in "
			       "it)");
	nl = (size_t)(colon - line);
	if (nl == 0 || nl > 64 || nl + 1 > namelen)
		return err_set(e, 400, "invalid_header", "a header's name is 1 to 64 characters");
	for (size_t i = 0; i < nl; i++)
		if (!is_tchar(line[i]))
			return err_set(e, 400, "invalid_header", "a header's name is letters, digits "
				       "and !#$%%&'*+-.^_`|~ only: '%.*s'", (int)nl, line);
	memcpy(name, line, nl);
	name[nl] = '\0';
	for (size_t i = 0; reserved[i]; i++)
		if (!strcasecmp(name, reserved[i]))
			return err_set(e, 400, "invalid_header", "header %s is the broker's own "
				       "(it frames or routes the call): a secret may not set it",
				       name);
	for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
		;
	end = v + strlen(v);
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	/* Never quoted back: it is the secret. */
	for (const char *p = v; *p; p++)
		if (((unsigned char)*p < 0x20 && *p != '\t') || (unsigned char)*p >= 0x7f)
			return err_set(e, 400, "invalid_header", "header %s's value has a control "
				       "character (CR, LF...) or a byte that is not ASCII", name);
	if (end == v)
		return err_set(e, 400, "invalid_header", "header %s has no value", name);
	if ((size_t)(end - v) > 4096 || (size_t)(end - v) + 1 > valuelen)
		return err_set(e, 400, "invalid_header", "header %s's value is longer than 4096 "
			       "bytes", name);
	memcpy(value, v, (size_t)(end - v));
	value[end - v] = '\0';
	return 0;
}

void secrets_env_var(const char *name, char *out, size_t outlen)
{
	size_t i;

	for (i = 0; name[i] && i + 1 < outlen; i++)
		out[i] = name[i] == '-' ? '_' : name[i] >= 'a' && name[i] <= 'z' ?
			 (char)(name[i] - 32) : name[i];
	out[i] = '\0';
	snprintf(out + i, outlen - i, "_BASE_URL");
}

void secrets_env_text(const char *base, char (*names)[64], size_t n, struct buf *out)
{
	char var[96];

	for (size_t i = 0; i < n; i++) {
		secrets_env_var(names[i], var, sizeof(var));
		buf_printf(out, "%s=%s/%s\n", var, base, names[i]);
	}
}

/* ENV's lines are secrets_env_text's (names, digits, '.', ':' and '/'),
 * so the here-document needs no quoting.  The hook's lines are kept only
 * when they are VAR=VALUE of such characters. */
void secrets_env_script(const char *env, struct buf *out)
{
	buf_adds(out,
		 "set -e\n"
		 "umask 022\n"
		 "e=/etc/berth/broker.env p=/etc/profile.d/berth-broker.sh f=/etc/environment\n"
		 "mkdir -p /etc/berth /etc/profile.d\n"
		 "cat >\"$e.new\" <<'BERTH_BROKER_ENV'\n");
	buf_adds(out, env);
	buf_adds(out,
		 "BERTH_BROKER_ENV\n"
		 "mv -f \"$e.new\" \"$e\"\n"
		 "x=\n"
		 "if [ -x /usr/lib/berth/broker-env ]; then\n"
		 "\tx=$(/usr/lib/berth/broker-env \"$e\" 2>/dev/null | "
		 "grep -E '^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_./:@%+,-]*$' | head -n 32) || x=\n"
		 "fi\n"
		 "v=$(cat \"$e\"; [ -z \"$x\" ] || printf '%s\\n' \"$x\")\n"
		 "if [ -n \"$v\" ]; then\n"
		 "\t{ echo '# berth: the credential broker (berth set MACHINE --secret NAME); "
		 "the secrets stay on the host'\n"
		 "\t  printf '%s\\n' \"$v\" | sed 's/^/export /'; } >\"$p.new\"\n"
		 "\tmv -f \"$p.new\" \"$p\"\n"
		 "else\n"
		 "\trm -f \"$p\"\n"
		 "fi\n"
		 "[ -f \"$f\" ] || : >\"$f\"\n"
		 "sed '/^# berth-broker begin$/,/^# berth-broker end$/d' \"$f\" >\"$f.new\"\n"
		 "[ -z \"$v\" ] || { echo '# berth-broker begin'; printf '%s\\n' \"$v\"; "
		 "echo '# berth-broker end'; } >>\"$f.new\"\n"
		 "cat \"$f.new\" >\"$f\"\n"
		 "rm -f \"$f.new\"\n");
}

int secrets_request_check(const char *method, const char *path, char *log_path,
			  size_t log_pathlen, struct err *e)
{
	size_t ml = strlen(method), pl = strlen(path), q;

	if (ml == 0 || ml > 15)
		return err_set(e, 400, "invalid_request", "invalid method");
	for (size_t i = 0; i < ml; i++)
		if (!is_tchar(method[i]))
			return err_set(e, 400, "invalid_request", "invalid method");
	if (!strcasecmp(method, "CONNECT") || !strcasecmp(method, "TRACE") ||
	    !strcasecmp(method, "TRACK"))
		return err_set(e, 400, "invalid_request", "the broker does not forward %s", method);
	if (path[0] != '/' || pl > 4000)
		return err_set(e, 400, "invalid_request", "the path must start with '/' and be "
			       "at most 4000 bytes");
	for (size_t i = 0; i < pl; i++)
		if ((unsigned char)path[i] <= 0x20 || (unsigned char)path[i] >= 0x7f ||
		    path[i] == '#')
			return err_set(e, 400, "invalid_request", "the path must be printable "
				       "ASCII, without spaces or '#'");
	q = strcspn(path, "?");
	if (!path_sound(path, path + q))
		return err_set(e, 400, "invalid_request", "the path may not have a '.' or '..' "
			       "segment or an encoded '/' or '\\': a call stays under its "
			       "secret's URL");
	snprintf(log_path, log_pathlen, "%.*s", (int)q, path);
	return 0;
}

int secrets_url_join(const char *url, const char *path, char *out, size_t outlen,
		     struct err *e)
{
	int n = snprintf(out, outlen, "%s%s", url, path);

	if (n < 0 || (size_t)n >= outlen)
		return err_set(e, 400, "invalid_request", "the upstream URL would be longer than "
			       "%zu bytes", outlen - 1);
	return 0;
}
