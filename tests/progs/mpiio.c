/* SPDX-License-Identifier: MIT */
/* An N-1 checkpoint through MPI-IO: every rank writes strided blocks of one
 * shared file, independently (MPI_File_write_at) or collectively
 * (MPI_File_write_at_all, ROMIO's collective buffering on or off), then the
 * file is read back collectively and checked. Exit 0 when it reads back as
 * written.
 *   mpiio indep|coll|coll-nocb PATH BLOCK COUNT */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char byte_at(long long block, long long i)
{
	return (unsigned char)(block * 131 + i * 7 + (i >> 9));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 5) {
		if (rank == 0)
			fprintf(stderr, "usage: mpiio indep|coll|coll-nocb PATH BLOCK COUNT\n");
		MPI_Finalize();
		return 2;
	}
	const char *mode = argv[1], *path = argv[2];
	long long block = atoll(argv[3]), count = atoll(argv[4]);
	MPI_Info info;
	MPI_Info_create(&info);
	if (strcmp(mode, "coll-nocb") == 0)
		MPI_Info_set(info, "romio_cb_write", "disable");
	else if (strcmp(mode, "coll") == 0)
		MPI_Info_set(info, "romio_cb_write", "enable");
	MPI_File fh;
	int err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh);
	if (err != MPI_SUCCESS) {
		fprintf(stderr, "rank %d: MPI_File_open '%s' failed\n", rank, path);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	unsigned char *buf = malloc((size_t)block), *back = malloc((size_t)block);
	for (long long k = 0; k < count; k++) {
		long long b = k * size + rank;
		for (long long i = 0; i < block; i++)
			buf[i] = byte_at(b, i);
		MPI_Offset off = (MPI_Offset)(b * block);
		if (strcmp(mode, "indep") == 0)
			err = MPI_File_write_at(fh, off, buf, (int)block, MPI_BYTE, MPI_STATUS_IGNORE);
		else
			err = MPI_File_write_at_all(fh, off, buf, (int)block, MPI_BYTE,
						    MPI_STATUS_IGNORE);
		if (err != MPI_SUCCESS) {
			fprintf(stderr, "rank %d: write of block %lld failed\n", rank, b);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
	MPI_File_sync(fh);
	MPI_Barrier(MPI_COMM_WORLD);
	/* Every rank reads back its neighbour's blocks: what the others wrote. */
	long long bad = 0;
	int peer = (rank + 1) % size;
	for (long long k = 0; k < count; k++) {
		long long b = k * size + peer;
		MPI_File_read_at_all(fh, (MPI_Offset)(b * block), back, (int)block, MPI_BYTE,
				     MPI_STATUS_IGNORE);
		for (long long i = 0; i < block; i++)
			bad += back[i] != byte_at(b, i);
	}
	MPI_File_close(&fh);
	long long total = 0;
	MPI_Reduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0 && total)
		fprintf(stderr, "mpiio: %lld bytes read back wrong\n", total);
	MPI_Bcast(&total, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
	free(buf);
	free(back);
	MPI_Info_free(&info);
	MPI_Finalize();
	return total != 0;
}
