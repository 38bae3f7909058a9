/* SPDX-License-Identifier: MIT */
/* catalog-id PATH: prints the name of PATH's entry in a cache's files/ or a
 * server's files/<uid>/ (common/catalog.c), so that a test can craft an
 * entry for any path. catalog-id -: the same for each line of stdin. */
#include <stdio.h>
#include <string.h>

#include "catalog.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: catalog-id PATH | -\n");
		return 2;
	}
	char id[STG_HASH_HEX_LEN + 1];
	if (strcmp(argv[1], "-") != 0) {
		stg_catalog_file_id(argv[1], id);
		puts(id);
		return 0;
	}
	char line[4097];
	while (fgets(line, sizeof(line), stdin)) {
		size_t n = strcspn(line, "\n");
		if (line[n] != '\n' && !feof(stdin)) {
			fprintf(stderr, "catalog-id: a path longer than %zu bytes\n", sizeof(line) - 2);
			return 1;
		}
		line[n] = '\0';
		stg_catalog_file_id(line, id);
		puts(id);
	}
	return ferror(stdin) || fflush(stdout) != 0;
}
