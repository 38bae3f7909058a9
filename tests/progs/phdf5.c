/* SPDX-License-Identifier: MIT */
/* Parallel HDF5: one dataset of one shared file, written by every rank (a
 * block of rows each, collectively), or read back and checked by a later
 * job. Exit 0 when the file holds what was written.
 *   phdf5 write|read PATH ROWS_PER_RANK */
#include <hdf5.h>
#include <stdbool.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLS 1024

static double value(hsize_t row, hsize_t col)
{
	return (double)row * 1e-3 + (double)col * 1e-7 + 1.0 / (double)(row + col + 1);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 4 || (strcmp(argv[1], "write") && strcmp(argv[1], "read"))) {
		if (rank == 0)
			fprintf(stderr, "usage: phdf5 write|read PATH ROWS_PER_RANK\n");
		MPI_Finalize();
		return 2;
	}
	bool writing = strcmp(argv[1], "write") == 0;
	hsize_t rows = (hsize_t)atoll(argv[3]);
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
	hid_t file = writing ? H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
			     : H5Fopen(argv[2], H5F_ACC_RDONLY, fapl);
	if (file < 0) {
		fprintf(stderr, "rank %d: cannot %s '%s'\n", rank, writing ? "create" : "open",
			argv[2]);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	hsize_t dims[2] = {rows * (hsize_t)size, COLS};
	hid_t space = H5Screate_simple(2, dims, NULL);
	/* No modification times in the object headers: two runs write the
	 * same bytes, so a file written through the shim compares equal. */
	hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_obj_track_times(dcpl, 0);
	hid_t dset = writing ? H5Dcreate2(file, "field", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT,
					  dcpl, H5P_DEFAULT)
			     : H5Dopen2(file, "field", H5P_DEFAULT);
	H5Pclose(dcpl);
	hsize_t start[2] = {rows * (hsize_t)rank, 0}, count[2] = {rows, COLS};
	H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
	hid_t mem = H5Screate_simple(2, count, NULL);
	hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
	H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
	double *buf = malloc(rows * COLS * sizeof(double));
	long long bad = 0;
	herr_t err;
	if (writing) {
		for (hsize_t r = 0; r < rows; r++)
			for (hsize_t c = 0; c < COLS; c++)
				buf[r * COLS + c] = value(start[0] + r, c);
		err = H5Dwrite(dset, H5T_NATIVE_DOUBLE, mem, space, dxpl, buf);
	} else {
		err = H5Dread(dset, H5T_NATIVE_DOUBLE, mem, space, dxpl, buf);
		for (hsize_t r = 0; r < rows && err >= 0; r++)
			for (hsize_t c = 0; c < COLS; c++)
				bad += buf[r * COLS + c] != value(start[0] + r, c);
	}
	if (err < 0)
		bad++;
	free(buf);
	H5Pclose(dxpl);
	H5Sclose(mem);
	H5Dclose(dset);
	H5Sclose(space);
	H5Pclose(fapl);
	if (H5Fclose(file) < 0)
		bad++;
	long long total = 0;
	MPI_Allreduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && total)
		fprintf(stderr, "phdf5: %lld values wrong or failed calls\n", total);
	MPI_Finalize();
	return total != 0;
}
