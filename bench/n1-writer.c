/* SPDX-License-Identifier: MIT */
/* The N-1 benchmark's application: N processes write one shared file in
 * strided stripes, as the ranks of an MPI job write a shared checkpoint.
 * Each process opens the file (O_CREAT, no O_TRUNC), fills its stripes in
 * memory (untimed), waits until all have opened, then pwrite()s its stripes
 * at (k * N + rank) * STRIPE, fsyncs (unless nosync) and closes. Prints the
 * seconds from the start signal until the last process has closed, and the
 * CPU seconds the writers spent meanwhile (all of them, the commit inside
 * the last close() included): on a machine with few cores, the second bounds
 * the first.
 *   n1-writer PATH WRITERS STRIPE_BYTES TOTAL_MIB [nosync] */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Stripe contents: random-looking (no dedup, no compression), per stripe. */
static void fill(uint8_t *p, size_t n, uint64_t stripe)
{
	uint64_t s = stripe * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		memcpy(p + i, &s, 8);
	}
}

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rank_main(const char *path, int rank, int n, size_t stripe, size_t per_rank,
		     bool sync, int ready, int go, int report)
{
	int fd = open(path, O_CREAT | O_WRONLY, 0644);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	uint8_t *buf = malloc(stripe * per_rank);
	if (!buf)
		return 1;
	for (size_t k = 0; k < per_rank; k++)
		fill(buf + k * stripe, stripe, k * (size_t)n + (size_t)rank);
	char c = 1;
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 0)
		return 1; /* go: the parent closes its end */
	double cpu0 = cpu_now();
	for (size_t k = 0; k < per_rank; k++) {
		off_t off = (off_t)((k * (size_t)n + (size_t)rank) * stripe);
		if (pwrite(fd, buf + k * stripe, stripe, off) != (ssize_t)stripe) {
			perror("pwrite");
			return 1;
		}
	}
	if ((sync && fsync(fd) < 0) || close(fd) < 0) {
		perror("fsync/close");
		return 1;
	}
	double cpu = cpu_now() - cpu0;
	return write(report, &cpu, sizeof(cpu)) == sizeof(cpu) ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc != 5 && !(argc == 6 && strcmp(argv[5], "nosync") == 0)) {
		fprintf(stderr, "usage: n1-writer PATH WRITERS STRIPE_BYTES TOTAL_MIB [nosync]\n");
		return 2;
	}
	bool sync = argc == 5;
	int n = atoi(argv[2]);
	size_t stripe = (size_t)atol(argv[3]), total = (size_t)atol(argv[4]) << 20;
	if (n < 1 || stripe < 1 || total % ((size_t)n * stripe)) {
		fprintf(stderr, "n1-writer: TOTAL must be a multiple of WRITERS x STRIPE\n");
		return 2;
	}
	int ready[2], go[2], report[2];
	if (pipe(ready) < 0 || pipe(go) < 0 || pipe(report) < 0)
		return 1;
	for (int r = 0; r < n; r++) {
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			close(ready[0]);
			close(go[1]);
			close(report[0]);
			_exit(rank_main(argv[1], r, n, stripe, total / stripe / (size_t)n, sync,
					ready[1], go[0], report[1]));
		}
	}
	close(ready[1]);
	close(go[0]);
	close(report[1]);
	char c;
	for (int r = 0; r < n; r++)
		if (read(ready[0], &c, 1) != 1)
			return 1;
	double t0 = now();
	close(go[1]);
	int failed = 0, st;
	while (wait(&st) > 0)
		failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	double wall = now() - t0, cpu = 0, c1;
	while (read(report[0], &c1, sizeof(c1)) == sizeof(c1))
		cpu += c1;
	printf("%.4f %.4f\n", wall, cpu);
	return failed;
}
