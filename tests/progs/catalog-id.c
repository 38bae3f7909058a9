/* SPDX-License-Identifier: MIT */
/* catalog-id PATH: prints the name of PATH's entry in a cache's files/
 * (common/catalog.c), so that a test can craft an entry for any path. */
#include <stdio.h>

#include "catalog.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: catalog-id PATH\n");
		return 2;
	}
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(argv[1], id);
	puts(id);
	return 0;
}
