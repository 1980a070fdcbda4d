#include "web/upgrade.h"

#include <pthread.h>

#include "common/banned.h"

static pthread_mutex_t closing = PTHREAD_MUTEX_INITIALIZER;

enum MHD_Result web_upgrade_close(struct MHD_UpgradeResponseHandle *urh)
{
	enum MHD_Result ret;

	pthread_mutex_lock(&closing);
	ret = MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
	pthread_mutex_unlock(&closing);
	return ret;
}

void web_upgrade_wait_closes(void)
{
	pthread_mutex_lock(&closing);
	pthread_mutex_unlock(&closing);
}
