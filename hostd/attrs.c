#include "hostd/attrs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/machine.h"
#include "common/banned.h"

/* Whether S is an environment variable's name. */
static bool env_name_ok(const char *s)
{
	if (!s[0] || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '_'))
			return false;
	return true;
}

/* Field FIELD (metadata, env) of J, an object of at most ATTRS_MAX_PAIRS
 * strings, into *OUT (NULL: absent or null, which clears it). */
static int get_map(json_t *j, const char *field, bool env, json_t **out, bool *set,
		   struct err *e)
{
	json_t *v = json_object_get(j, field), *s;
	const char *k;

	*out = NULL;
	*set = v != NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return err_set(e, 400, "invalid_attrs", "%s must be an object of strings", field);
	if (json_object_size(v) > ATTRS_MAX_PAIRS)
		return err_set(e, 400, "invalid_attrs", "%s has %zu keys: at most %d", field,
			       json_object_size(v), ATTRS_MAX_PAIRS);
	json_object_foreach(v, k, s) {
		if (!json_is_string(s))
			return err_set(e, 400, "invalid_attrs", "%s.%s must be a string", field, k);
		if (!k[0] || strlen(k) > 256)
			return err_set(e, 400, "invalid_attrs", "%s: a key must have 1 to 256 bytes",
				       field);
		if (env && !env_name_ok(k))
			return err_set(e, 400, "invalid_attrs", "env: '%.64s' is not a variable's "
				       "name (letters, digits and '_', not starting with a digit)", k);
		if (json_string_length(s) > 4096 || strlen(json_string_value(s)) !=
							    json_string_length(s))
			return err_set(e, 400, "invalid_attrs", "%s.%.64s: a value has at most 4096 "
				       "bytes and no NUL", field, k);
	}
	*out = v;
	return 0;
}

static json_t empty_marker;	/* (never dereferenced: "set to {}") */

int attrs_parse(json_t *j, struct attrs_req *r, struct err *e)
{
	json_t *v = json_object_get(j, "expires_in");
	bool set;

	memset(r, 0, sizeof(*r));
	if (v) {
		int64_t s = -1;
		r->expires_set = true;
		if (json_is_null(v))
			s = 0;
		else if (json_is_integer(v))
			s = json_integer_value(v);
		else if (json_is_string(v) && !strcmp(json_string_value(v), "never"))
			s = 0;
		else if (json_is_string(v) && duration_parse(json_string_value(v), &s) < 0)
			s = -1;
		if (s < 0 || s > ATTRS_MAX_EXPIRES_S)
			return err_set(e, 400, "invalid_expires", "expires_in must be seconds from "
				       "now, 1 to %lld (or a duration: 90s, 10m, 2h), or 0, null "
				       "or \"never\" for no deadline", ATTRS_MAX_EXPIRES_S);
		r->expires_in = s;
	}
	v = json_object_get(j, "expire_action");
	if (v) {
		const char *a = json_string_value(v);
		if (!a || (strcmp(a, "suspend") && strcmp(a, "delete")))
			return err_set(e, 400, "invalid_expire_action", "expire_action must be "
				       "\"suspend\" (memory kept) or \"delete\"");
		r->action = a;
	}
	if (get_map(j, "metadata", false, &r->metadata, &set, e) < 0)
		return -1;
	if (set && !r->metadata)
		r->metadata = &empty_marker;
	if (get_map(j, "env", true, &r->env, &set, e) < 0)
		return -1;
	if (set && !r->env)
		r->env = &empty_marker;
	return 0;
}

bool attrs_any(const struct attrs_req *r)
{
	return r->expires_set || r->action || r->metadata || r->env;
}

/* M as compact JSON text (malloc'd); "{}" for the marker. */
static char *map_text(json_t *m)
{
	char *s = m == &empty_marker ? strdup("{}") : json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);

	if (!s)
		abort();
	return s;
}

int attrs_apply(struct hostd *h, const char *id, const struct attrs_req *r, struct err *e)
{
	struct db_attrs a;
	int rc;

	if (!attrs_any(r))
		return 0;
	if (db_attrs_get(h->db, id, &a, e) < 0)
		return -1;
	if (r->expires_set)
		a.expires = r->expires_in ? now_s() + r->expires_in : 0;
	if (r->action)
		snprintf(a.action, sizeof(a.action), "%s", r->action);
	if (r->metadata) {
		free(a.metadata);
		a.metadata = map_text(r->metadata);
	}
	if (r->env) {
		free(a.env);
		a.env = map_text(r->env);
	}
	rc = db_attrs_set(h->db, id, &a, e);
	db_attrs_free(&a);
	return rc;
}

void attrs_json_write(struct hostd *h, const char *id, struct buf *b)
{
	struct db_attrs a;
	int64_t now = now_s();

	if (db_attrs_get(h->db, id, &a, NULL) < 0)
		memset(&a, 0, sizeof(a));
	buf_printf(b, ",\"expires\":%lld", (long long)a.expires);
	if (a.expires)
		buf_printf(b, ",\"expires_in_s\":%lld",
			   (long long)(a.expires > now ? a.expires - now : 0));
	buf_adds(b, ",\"expire_action\":");
	buf_add_json_str(b, a.action[0] ? a.action : "delete");
	/* (written by attrs_apply from parsed JSON: valid JSON text) */
	buf_adds(b, ",\"metadata\":");
	buf_adds(b, a.metadata ? a.metadata : "{}");
	buf_adds(b, ",\"env\":");
	buf_adds(b, a.env ? a.env : "{}");
	db_attrs_free(&a);
}

/* Meet machine ID's deadline, passed at NOW, if it runs. */
static void meet(struct hostd *h, const char *id, int64_t now)
{
	struct machine m, out;
	struct db_attrs a;
	struct act_opts o = { 0 };
	struct err e = { 0 };

	if (db_machine_get_id(h->db, id, &m, NULL) < 0 || db_attrs_get(h->db, id, &a, NULL) < 0)
		return;
	/* "suspend" acts on a running machine; "delete" on any that is
	 * neither being made nor deleted (an idle policy's suspend does not
	 * save it from its end). */
	if (strcmp(a.action, "suspend") == 0 ? m.state != MS_RUNNING
	    : m.state == MS_CREATING || m.state == MS_DELETING) {
		db_attrs_free(&a);
		return;
	}
	/* (read again: a PATCH may have moved it meanwhile) */
	if (!a.expires || a.expires > now) {
		db_attrs_free(&a);
		return;
	}
	events_cause("its deadline passed %llds ago", (long long)(now - a.expires));
	if (strcmp(a.action, "suspend") == 0) {
		log_info("deadline: %s/%s: suspending", m.owner, m.name);
		if (machine_act(h, m.owner, m.name, ACT_SUSPEND, &o, &out, NULL, &e) < 0) {
			log_warn("deadline: suspend %s/%s: %s", m.owner, m.name, e.msg);
		} else {
			a.expires = 0;
			if (db_attrs_set(h->db, id, &a, &e) < 0)
				log_warn("deadline: %s/%s: %s", m.owner, m.name, e.msg);
		}
	} else {
		log_info("deadline: %s/%s: deleting", m.owner, m.name);
		if (machine_delete(h, m.owner, m.name, &e) < 0)
			log_warn("deadline: delete %s/%s: %s", m.owner, m.name, e.msg);
	}
	events_cause_clear();
	db_attrs_free(&a);
}

void attrs_check(struct hostd *h)
{
	char (*ids)[37] = NULL;
	size_t n = 0;
	int64_t now = now_s();
	struct err e = { 0 };

	if (db_attrs_expired(h->db, now, &ids, &n, &e) < 0) {
		log_warn("deadline: %s", e.msg);
		return;
	}
	for (size_t i = 0; i < n; i++)
		meet(h, ids[i], now);
	free(ids);
}
