/* rdmaconnect - a stranger's queue pair, for the tests: connects an RC
 * queue pair to an omnifs node's rdma_cm port with a token of its own
 * choosing, as a peer that never passed the handshake would have to.
 *
 *   rdmaconnect IP PORT [TOKEN-HEX]
 *
 * Prints "established", "rejected" or "failed: <event>" and exits 0, 1
 * or 2.  A node must reject every token it did not give in a WELCOME. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next event on ch within 5 s, or NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&pf, 1, 5000) != 1 || rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char **got)
{
	struct rdma_cm_event *e = next_event(ch);

	*got = e ? rdma_event_str(e->event) : "no event within 5 s";
	int ok = e && e->event == want;
	if (e)
		rdma_ack_cm_event(e);
	return ok;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	uint8_t token[64] = { 0 };
	size_t ntoken = 0;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	const char *got;

	if (argc < 3 || argc > 4 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		int help = argc == 2 && !strcmp(argv[1], "--help");
		return fprintf(help ? stdout : stderr, "usage: rdmaconnect IP PORT [TOKEN-HEX]\n"),
		       help ? 0 : 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	for (const char *h = argc == 4 ? argv[3] : ""; h[0] && h[1] && ntoken < sizeof(token); h += 2)
		sscanf(h, "%2hhx", &token[ntoken++]);
	if (!(ch = rdma_create_event_channel()) || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return perror("rdma_cm"), 2;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000) ||
	    !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, &got) ||
	    rdma_resolve_route(id, 2000) || !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &got))
		return printf("failed: %s\n", got), 2;
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { 1, 1, 1, 1, 0 } };
	struct rdma_conn_param cp = { .private_data = ntoken ? token : NULL,
				      .private_data_len = (uint8_t)ntoken, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (!cq || rdma_create_qp(id, pd, &qa) || rdma_connect(id, &cp))
		return perror("queue pair"), 2;
	struct rdma_cm_event *e = next_event(ch);
	enum rdma_cm_event_type t = e ? e->event : RDMA_CM_EVENT_CONNECT_ERROR;
	if (e)
		rdma_ack_cm_event(e);
	if (t == RDMA_CM_EVENT_ESTABLISHED)
		return puts("established"), 0;
	if (t == RDMA_CM_EVENT_REJECTED)
		return puts("rejected"), 1;
	return printf("failed: %s\n", e ? rdma_event_str(t) : "no event within 5 s"), 2;
}
