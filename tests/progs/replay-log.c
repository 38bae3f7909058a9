/* SPDX-License-Identifier: MIT */
/* replay-log: lists and replays the write log of a dm-log-writes device. */
/*
 * usage: replay-log list LOG
 *        replay-log replay LOG DEV FROM OFFSET TO
 *
 * The log format is the kernel's (Documentation/admin-guide/device-mapper/
 * log-writes.rst, drivers/md/dm-log-writes.c), little-endian throughout:
 *
 *   block 0          the super: magic 0x6a736677736872 (u64), version 1
 *                    (u64), entries (u64), block size (u32: the logical
 *                    block size of the logged device, 512 to 65536)
 *   then per entry   one block: sector (u64), blocks (u64), flags (u64),
 *                    data length (u64), and for a mark its name (data
 *                    length bytes) in the rest of the block; then, for a
 *                    write (no DISCARD), the written data: blocks blocks
 *
 * Sectors and counts are in units of the block size. Flags: FLUSH 1 (every
 * write logged before it reached the disk), FUA 2 (this one did), DISCARD 4,
 * MARK 8 (a name a user logged with `dmsetup message DEV 0 mark NAME`),
 * METADATA 16 (informational). Entries are logged in the order the disk
 * completed them, so replaying entries 0..N-1 onto a zeroed device gives what
 * the disk held at that point; at a FLUSH or FUA entry, a state a power cut
 * may leave.
 *
 * list prints one line per entry: INDEX OFFSET FLAGS SECTOR BLOCKS [NAME],
 * OFFSET the entry's byte offset in LOG, FLAGS letters among F (flush),
 * U (FUA), D (discard), M (mark), or "-". replay applies the entries FROM to
 * TO-1 to DEV, starting at entry FROM at byte OFFSET (from list; 0 0 is the
 * start), and syncs DEV: run it for successive ranges to step through the log.
 * A discard zeroes its range (BLKZEROOUT on a block device), one thing a
 * discard may leave.
 *
 * Every field is checked before it is used: a log that does not check out
 * is refused (exit 1), never half-replayed past the bad entry unnoticed.
 * Exit status: 0 done, 1 a bad log or a failed call (message on stderr),
 * 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_MAGIC 0x6a736677736872ULL
#define LOG_VERSION 1
#define FLAG_FLUSH 1u
#define FLAG_FUA 2u
#define FLAG_DISCARD 4u
#define FLAG_MARK 8u
#define FLAG_METADATA 16u
#define ENTRY_HEADER 32

struct log {
	int fd;
	uint64_t size; /* bytes of the log file or device */
	uint64_t entries;
	uint32_t block;
};

struct entry {
	uint64_t sector, blocks, flags, data_len;
	char name[4096];
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("replay-log: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t dev_size(int fd, const char *what)
{
	struct stat st;
	uint64_t n;

	if (fstat(fd, &st) < 0)
		die("fstat '%s': %s", what, strerror(errno));
	if (S_ISREG(st.st_mode))
		return (uint64_t)st.st_size;
	if (!S_ISBLK(st.st_mode))
		die("'%s' is neither a file nor a block device", what);
	if (ioctl(fd, BLKGETSIZE64, &n) < 0)
		die("BLKGETSIZE64 '%s': %s", what, strerror(errno));
	return n;
}

static void read_at(int fd, void *buf, size_t n, uint64_t off, const char *what)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read '%s' at %" PRIu64 ": %s", what, off + done, strerror(errno));
		if (r == 0)
			die("'%s' ends at %" PRIu64 ", inside entry data: truncated log", what,
			    off + done);
		done += (size_t)r;
	}
}

static void write_at(int fd, const void *buf, size_t n, uint64_t off, const char *what)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("write '%s' at %" PRIu64 ": %s", what, off + done,
			    r < 0 ? strerror(errno) : "no progress");
		done += (size_t)r;
	}
}

static void log_open(struct log *lg, const char *path)
{
	unsigned char super[28];

	lg->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (lg->fd < 0)
		die("open '%s': %s", path, strerror(errno));
	lg->size = dev_size(lg->fd, path);
	if (lg->size < 512)
		die("'%s' is too small for a log (%" PRIu64 " bytes)", path, lg->size);
	read_at(lg->fd, super, sizeof(super), 0, path);
	if (le64(super) != LOG_MAGIC)
		die("'%s' is not a dm-log-writes log (magic %#" PRIx64 ")", path, le64(super));
	if (le64(super + 8) != LOG_VERSION)
		die("'%s': log version %" PRIu64 ", this reads %d", path, le64(super + 8),
		    LOG_VERSION);
	lg->entries = le64(super + 16);
	lg->block = (uint32_t)super[24] | (uint32_t)super[25] << 8 | (uint32_t)super[26] << 16 |
		    (uint32_t)super[27] << 24;
	if (lg->block < 512 || lg->block > 65536 || (lg->block & (lg->block - 1)))
		die("'%s': block size %" PRIu32 " is not a power of two from 512 to 65536", path,
		    lg->block);
	/* Each entry takes a block at least: a count past that is damage. */
	if (lg->entries > lg->size / lg->block)
		die("'%s': %" PRIu64 " entries cannot fit in %" PRIu64 " bytes", path, lg->entries,
		    lg->size);
}

/* Reads the entry at *off, checks it, and moves *off past its data. */
static void entry_read(const struct log *lg, uint64_t index, uint64_t *off, struct entry *e)
{
	unsigned char *blk = malloc(lg->block);

	if (!blk)
		die("out of memory");
	if (*off % lg->block || *off + lg->block > lg->size)
		die("entry %" PRIu64 " at %" PRIu64 " lies outside the log", index, *off);
	read_at(lg->fd, blk, lg->block, *off, "log");
	e->sector = le64(blk);
	e->blocks = le64(blk + 8);
	e->flags = le64(blk + 16);
	e->data_len = le64(blk + 24);
	if (e->flags & ~(uint64_t)(FLAG_FLUSH | FLAG_FUA | FLAG_DISCARD | FLAG_MARK | FLAG_METADATA))
		die("entry %" PRIu64 ": unknown flags %#" PRIx64, index, e->flags);
	e->name[0] = '\0';
	if (e->flags & FLAG_MARK) {
		if (e->data_len == 0 || e->data_len > lg->block - ENTRY_HEADER ||
		    e->data_len >= sizeof(e->name) || e->blocks != 0)
			die("entry %" PRIu64 ": a mark of %" PRIu64 " bytes and %" PRIu64 " blocks",
			    index, e->data_len, e->blocks);
		memcpy(e->name, blk + ENTRY_HEADER, e->data_len);
		e->name[e->data_len] = '\0';
		for (size_t i = 0; i < e->data_len; i++)
			if (e->name[i] <= ' ' || e->name[i] > '~')
				die("entry %" PRIu64 ": a mark name with byte %#x", index,
				    (unsigned char)e->name[i]);
	} else if (e->data_len != 0) {
		/* Inline data (the kernel's DAX path, gone since 5.x): not in our logs. */
		die("entry %" PRIu64 ": %" PRIu64 " bytes of inline data, not supported", index,
		    e->data_len);
	}
	if (e->blocks > (UINT64_MAX / lg->block) / 2)
		die("entry %" PRIu64 ": %" PRIu64 " blocks", index, e->blocks);
	free(blk);
	*off += lg->block;
	if (!(e->flags & FLAG_DISCARD))
		*off += e->blocks * lg->block;
	if (*off > lg->size)
		die("entry %" PRIu64 ": its data runs past the end of the log", index);
}

static void flags_text(uint64_t flags, char *buf)
{
	char *p = buf;

	if (flags & FLAG_FLUSH)
		*p++ = 'F';
	if (flags & FLAG_FUA)
		*p++ = 'U';
	if (flags & FLAG_DISCARD)
		*p++ = 'D';
	if (flags & FLAG_MARK)
		*p++ = 'M';
	if (p == buf)
		*p++ = '-';
	*p = '\0';
}

static int cmd_list(const char *log_path)
{
	struct log lg;
	struct entry e;
	uint64_t off;
	char flags[8];

	log_open(&lg, log_path);
	off = lg.block;
	for (uint64_t i = 0; i < lg.entries; i++) {
		uint64_t at = off;

		entry_read(&lg, i, &off, &e);
		flags_text(e.flags, flags);
		printf("%" PRIu64 " %" PRIu64 " %s %" PRIu64 " %" PRIu64 "%s%s\n", i, at, flags,
		       e.sector, e.blocks, e.name[0] ? " " : "", e.name);
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		die("writing the listing: %s", strerror(errno));
	close(lg.fd);
	return 0;
}

static void zero_range(int fd, int is_blk, uint64_t start, uint64_t len)
{
	static char zeros[1 << 16];
	uint64_t range[2] = { start, len };

	if (is_blk && ioctl(fd, BLKZEROOUT, range) == 0)
		return;
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < sizeof(zeros) ? (size_t)(len - done) : sizeof(zeros);

		write_at(fd, zeros, n, start + done, "device");
		done += n;
	}
}

static uint64_t parse_u64(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		die("%s must be a whole number, not '%s'", what, s);
	return v;
}

static int cmd_replay(const char *log_path, const char *dev_path, uint64_t from, uint64_t off,
		      uint64_t to)
{
	struct log lg;
	struct entry e;
	struct stat st;
	uint64_t dev_bytes;
	size_t cap = 0;
	char *buf = NULL;
	int dev;

	log_open(&lg, log_path);
	if (to > lg.entries)
		die("entry %" PRIu64 " is past the log's %" PRIu64 " entries", to, lg.entries);
	if (from > to)
		die("FROM %" PRIu64 " is after TO %" PRIu64, from, to);
	if (from == 0 && off == 0)
		off = lg.block;
	dev = open(dev_path, O_RDWR | O_CLOEXEC);
	if (dev < 0)
		die("open '%s': %s", dev_path, strerror(errno));
	if (fstat(dev, &st) < 0)
		die("fstat '%s': %s", dev_path, strerror(errno));
	dev_bytes = dev_size(dev, dev_path);
	for (uint64_t i = from; i < to; i++) {
		uint64_t data_off = off + lg.block, len;

		entry_read(&lg, i, &off, &e);
		if (e.flags & FLAG_MARK || e.blocks == 0)
			continue;
		len = e.blocks * lg.block;
		if (e.sector > dev_bytes / lg.block || len > dev_bytes - e.sector * lg.block)
			die("entry %" PRIu64 " writes past the end of '%s'", i, dev_path);
		if (e.flags & FLAG_DISCARD) {
			zero_range(dev, S_ISBLK(st.st_mode), e.sector * lg.block, len);
			continue;
		}
		if (len > cap) {
			free(buf);
			cap = len;
			buf = malloc(cap);
			if (!buf)
				die("out of memory for %" PRIu64 " bytes", len);
		}
		read_at(lg.fd, buf, len, data_off, log_path);
		write_at(dev, buf, len, e.sector * lg.block, dev_path);
	}
	/* What the next reader opens (a snapshot over DEV) reads the disk, not
	   this descriptor's page cache. */
	if (fsync(dev) < 0)
		die("fsync '%s': %s", dev_path, strerror(errno));
	free(buf);
	close(dev);
	close(lg.fd);
	return 0;
}

static void usage(int rc)
{
	fputs("usage: replay-log list LOG\n"
	      "       replay-log replay LOG DEV FROM OFFSET TO\n"
	      "\n"
	      "Lists the entries of a dm-log-writes log (INDEX OFFSET FLAGS SECTOR BLOCKS\n"
	      "[MARK]; FLAGS among F flush, U FUA, D discard, M mark, else -), or applies\n"
	      "its entries FROM to TO-1 onto DEV, entry FROM being at byte OFFSET of LOG\n"
	      "(as listed; 0 0 for the start).\n",
	      rc ? stderr : stdout);
	exit(rc);
}

int main(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		usage(0);
	if (argc == 3 && !strcmp(argv[1], "list"))
		return cmd_list(argv[2]);
	if (argc == 7 && !strcmp(argv[1], "replay"))
		return cmd_replay(argv[2], argv[3], parse_u64(argv[4], "FROM"),
				  parse_u64(argv[5], "OFFSET"), parse_u64(argv[6], "TO"));
	usage(2);
}
