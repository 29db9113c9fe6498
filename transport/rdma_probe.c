/* rdma_probe.c - count usable verbs devices, so transport=rdma can refuse
 * to mount on a node that has none instead of falling back silently. */
#include "rdma_probe.h"

#include <errno.h>
#include <infiniband/verbs.h>

static int port_active(struct ibv_context *ctx)
{
	struct ibv_device_attr da;

	if (ibv_query_device(ctx, &da))
		return 0;
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		if (!ibv_query_port(ctx, p, &pa) && pa.state == IBV_PORT_ACTIVE)
			return 1;
	}
	return 0;
}

int rdma_active_devices(void)
{
	int n = 0, active = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list)
		return n == 0 ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		active += port_active(ctx);
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return active;
}
