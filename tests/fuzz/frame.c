/* A libFuzzer target for the peer protocol's decoder: the bytes a peer
 * port reads, as a stream of frames.  Whatever comes in, the decoder
 * answers 0 or -EPROTO/-EPROTONOSUPPORT/-EMSGSIZE, never reads past what
 * it was given and leaks nothing (run under ASan and UBSan). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../transport/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	while (size >= PROTO_HDR) {
		struct proto_hdr h;
		struct proto_msg m;
		if (proto_frame_check(data, &h))
			break;
		data += PROTO_HDR;
		size -= PROTO_HDR;
		size_t len = h.len < size ? h.len : size;
		/* A DATA body is read as its header only, as the receiver does:
		 * it has min(len, PROTO_DATA_HDR) bytes in hand, no more. */
		if (h.type == PT_DATA && size < (h.len < PROTO_DATA_HDR ? h.len : PROTO_DATA_HDR))
			break;
		if (!proto_decode(h.type, data, h.type == PT_DATA ? h.len : len, &m)) {
			if (m.type == PT_LISTING)
				for (uint32_t i = 0; i < m.u.listing.n; i++)
					if (m.u.listing.objects && strlen(m.u.listing.obj[i].key) > PROTO_KEY_MAX)
						__builtin_trap();
			proto_msg_free(&m);
		}
		data += len;
		size -= len;
	}
	return 0;
}
