/* rdma_probe.h - is there an RDMA device this node could use? */
#ifndef OMNI_RDMA_PROBE_H
#define OMNI_RDMA_PROBE_H

/* The number of verbs devices with at least one active port, or -errno. */
int rdma_active_devices(void);

#endif
