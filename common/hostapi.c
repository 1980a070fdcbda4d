#include "common/hostapi.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/buf.h"
#include "common/banned.h"

static size_t on_data(char *p, size_t size, size_t n, void *data)
{
	buf_add(data, p, size * n);
	return size * n;
}

int hostapi_call(const char *sock, const char *method, const char *path, json_t *body,
		 long *status, json_t **resp, char *err, size_t errlen)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	struct buf out = BUF_INIT;
	char url[1024], *text = NULL;
	CURLcode rc;
	int ret = -1;

	*resp = NULL;
	*status = 0;
	if (!h) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return -1;
	}
	snprintf(url, sizeof(url), "http://berth%s", path);
	curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	/* No timeout: a wake waits for a boot, an image build for its recipe,
	 * and hostd bounds those itself. */
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "cannot reach berth-hostd at %s: %s", sock,
			 curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	if (out.len)
		*resp = json_loadb(out.data, out.len, 0, NULL);
	ret = 0;
out:
	free(text);
	buf_free(&out);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return ret;
}

const char *hostapi_message(json_t *resp, const char *fallback)
{
	const char *m = json_string_value(json_object_get(json_object_get(resp, "error"),
							  "message"));

	if (!m)
		m = json_string_value(json_object_get(resp, "message"));
	return m ? m : fallback;
}
