#include "hostd/machine_json.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/attrs.h"
#include "hostd/machine.h"
#include "hostd/machine_steps.h"
#include "common/banned.h"

static void add_key(struct buf *b, const char *key)
{
	buf_add(b, ",\"", 2);
	buf_adds(b, key);
	buf_add(b, "\":", 2);
}

static void add_str(struct buf *b, const char *key, const char *v)
{
	add_key(b, key);
	buf_add_json_str(b, v);
}

static void add_int(struct buf *b, const char *key, long long v)
{
	char n[24];

	add_key(b, key);
	buf_add(b, n, (size_t)snprintf(n, sizeof(n), "%lld", v));
}

void machine_json_write(struct hostd *h, const struct machine *m,
			const struct machine_facts *f, struct buf *b)
{
	char host[64], name[200], t[32];
	int port = 0;
	const struct idle_view *iv = &f->idle;

	machine_dom_name(h, m, name, sizeof(name));
	buf_adds(b, "{\"id\":");
	buf_add_json_str(b, m->id);
	add_str(b, "name", m->name);
	add_str(b, "owner", m->owner);
	add_str(b, "image", m->image);
	add_str(b, "state", mstate_name(m->state));
	add_int(b, "vcpus", m->vcpus);
	add_int(b, "memory", (long long)m->memory);
	add_int(b, "disk", (long long)m->disk);
	add_int(b, "created", m->created);
	add_int(b, "state_since", m->state_since);
	add_str(b, "mac", m->mac);
	add_key(b, "ssh");
	if (machine_endpoint(h, m, host, sizeof(host), &port, NULL) == 0) {
		buf_adds(b, "{\"host\":");
		buf_add_json_str(b, host);
		add_int(b, "port", port);
		add_str(b, "user", f->user);
		buf_adds(b, "}");
	} else {
		buf_adds(b, "null");
	}
	/* Its egress policy (GET .../egress has all of a long one). */
	if (f->egress) {
		add_key(b, "egress");
		buf_adds(b, "{\"policy\":");
		buf_add_json_str(b, f->egress);
		add_key(b, "default");
		buf_adds(b, m->egress[0] ? "false" : "true");
		if (f->egress_long) {
			add_key(b, "truncated");
			buf_adds(b, "true");
		}
		buf_adds(b, "}");
	}
	/* The SSH host key the gateways and berth exec insist on. */
	add_str(b, "host_key", m->host_key);
	add_str(b, "host_key_state", host_key_state_name(m->host_key_state));
	add_str(b, "domain", name);
	add_str(b, "hypervisor", virt_hypervisor(h->virt));
	if (f->allocated >= 0)
		add_int(b, "allocated", f->allocated);
	if (f->memory_bytes >= 0)
		add_int(b, "memory_bytes", f->memory_bytes);
	/* The gateways' live sessions on it (the idle policy reads them). */
	add_int(b, "sessions", f->sessions);
	duration_format(iv->timeout, t, sizeof(t));
	add_key(b, "idle");
	buf_adds(b, "{\"timeout\":");
	buf_add_json_str(b, t);
	add_int(b, "timeout_s", iv->timeout);
	add_key(b, "default");
	buf_adds(b, iv->is_default ? "true" : "false");
	if (iv->seen) {
		add_int(b, "quiet_s", iv->quiet_s);
		add_str(b, "last_activity", iv->last_activity);
		add_int(b, "cpu_percent", iv->cpu_percent);
		if (iv->timeout > 0)
			add_int(b, "suspend_in_s", iv->timeout > iv->quiet_s ? iv->timeout - iv->quiet_s : 0);
	}
	buf_adds(b, "}");
	/* A long operation in progress (an export), with its progress. */
	if (f->op && f->total) {
		add_key(b, "operation");
		buf_adds(b, "{\"op\":");
		buf_add_json_str(b, f->op);
		add_int(b, "done", (long long)f->done);
		add_int(b, "total", (long long)f->total);
		buf_adds(b, "}");
	}
	/* Its deadline, metadata and env (hostd/attrs.h). */
	attrs_json_write(h, m->id, b);
	buf_adds(b, "}");
}

json_t *machine_json(struct hostd *h, const struct machine *m, const struct machine_facts *f)
{
	struct buf b = BUF_INIT;
	json_t *j;

	machine_json_write(h, m, f, &b);
	j = json_loadb(b.data, b.len, 0, NULL);
	if (!j) {
		/* The writer's own output: a bug, not input; still answered. */
		log_error("machine %s: its JSON does not parse: %s", m->id, buf_str(&b));
		j = json_pack("{s:s, s:s, s:s}", "id", m->id, "state", mstate_name(m->state),
			      "error", "internal: see hostd's log");
	}
	buf_free(&b);
	return j;
}
