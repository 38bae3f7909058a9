/* SPDX-License-Identifier: MIT */
/* segment-records SEGMENT...: prints "<file> <offset> <body length>" for
 * each valid record of server segment files, in either segment format, as
 * the server's own scan finds them: for tests that damage records. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "segment.h"
#include "util.h"

static int print_record(void *arg, const struct stg_hash *h, uint64_t offset, uint32_t len,
			const struct stg_hash *base)
{
	(void)h;
	(void)base;
	printf("%s %" PRIu64 " %" PRIu32 "\n", (const char *)arg, offset, len);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: segment-records SEGMENT...\n");
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
		uint8_t hdr[STG_SEGMENT_HEADER_SIZE];
		struct stg_segment_header sh;
		struct stg_segment_scan_result res;
		int r = fd < 0 ? -errno : stg_pread_all(fd, hdr, sizeof(hdr), 0);
		if (r == 0)
			r = stg_segment_header_decode(hdr, sizeof(hdr), &sh);
		if (r == 0)
			r = stg_segment_scan(fd, sh.format, STG_SEGMENT_HEADER_SIZE, print_record,
					     argv[i], &res);
		if (fd >= 0)
			close(fd);
		if (r < 0) {
			fprintf(stderr, "segment-records: '%s': %s\n", argv[i], strerror(-r));
			return 1;
		}
	}
	return 0;
}
