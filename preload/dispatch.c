/* SPDX-License-Identifier: MIT */
/* System calls made without libc: Rust's rustix (behind the tempfile crate,
 * hence safetensors), liburing, hand-written assembly. No preload sees them;
 * Linux's Syscall User Dispatch (5.11) traps every system call made from
 * outside libc's text into a SIGSYS handler, which sends one naming a
 * captured path or descriptor to the shim's wrapper (syscall_route, as
 * syscall() does) and makes any other from inside libc, unchanged.
 *
 * The dispatch is per thread and ends at fork and exec: every thread the
 * program starts with pthread_create, and a forked child, turn it on again.
 * A trapped call costs a signal delivery; calls made through libc, nearly
 * all of them, cost nothing. SIGSYS must stay deliverable (a trap with it
 * blocked kills the process), so the shim keeps it out of every signal mask
 * and keeps the handler, calling the program's own SIGSYS handler for
 * SIGSYS it did not cause (seccomp). Off for Go programs (their runtime
 * makes every call itself and runs on stacks too small for a handler), on
 * other architectures than x86-64, and with STAGEHAND_SYSCALL_DISPATCH=0. */
#include <errno.h>
#include <link.h>
#include <linux/audit.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#define SYSCALL_DISPATCH_FILTER_ALLOW 0
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif
#ifndef SYS_USER_DISPATCH
#define SYS_USER_DISPATCH 2
#endif

/* Read by the kernel at every system call made outside libc. */
__thread char dispatch_selector __attribute__((tls_model("initial-exec")));

struct range {
	uintptr_t lo, hi;
};

static struct {
	bool on;
	struct range libc, loader;
	/* The program's own SIGSYS disposition (the shim keeps the real one). */
	struct sigaction app_sigsys;
} d;

static bool in_range(const struct range *r, uintptr_t addr)
{
	return addr - r->lo < r->hi - r->lo;
}

/* The executable segment of the object loaded at base (0: none; a
 * non-PIE program is loaded at 0), or of the one holding addr. */
struct text_query {
	uintptr_t base, addr;
	struct range *out;
};

static int find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct text_query *q = arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		struct range r = {info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz};
		if ((q->base && info->dlpi_addr == q->base) || in_range(&r, q->addr)) {
			*q->out = r;
			return 1;
		}
	}
	return 0;
}

static bool text_of(uintptr_t base, uintptr_t addr, struct range *out)
{
	struct text_query q = {base, addr, out};
	return dl_iterate_phdr(find_text, &q) == 1;
}

/* Go binaries and libraries (c-shared) carry a note owned by "Go" (their
 * build id). A Go library loaded later with dlopen is not seen. */
static int find_go_note(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const char *name = p + sizeof(*n);
			/* (Go's linker writes the name "Go\0\0", size 4) */
			if ((n->n_namesz == 3 || n->n_namesz == 4) && name + 3 <= end &&
			    memcmp(name, "Go", 3) == 0) {
				*(bool *)arg = true;
				return 1;
			}
			p = name + ((n->n_namesz + 3) & ~3u) + ((n->n_descsz + 3) & ~3u);
		}
	}
	return 0;
}

static bool has_go_code(void)
{
	bool go = false;
	dl_iterate_phdr(find_go_note, &go);
	return go;
}

#ifdef __x86_64__
#define SIGBIT(sig) (1ull << ((sig) - 1))

/* The kernel's struct sigaction, as rt_sigaction takes it. */
struct ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

/* A call made from inside libc, as the trapped code asked; the kernel's
 * convention (-errno). */
static long make_call(long nr, const long *a)
{
	long r = REAL(syscall)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	return r == -1 ? -errno : r;
}

/* rt_sigprocmask, applied to the mask the thread gets back when the handler
 * returns (changing it inside the handler would be undone then). */
static long sigprocmask_on_return(ucontext_t *uc, const long *a)
{
	if (a[3] != 8)
		return -EINVAL;
	uint64_t *cur = (uint64_t *)&uc->uc_sigmask, old = *cur;
	if (a[1]) {
		uint64_t set = *(const uint64_t *)a[1];
		switch (a[0]) {
		case SIG_BLOCK: *cur |= set; break;
		case SIG_UNBLOCK: *cur &= ~set; break;
		case SIG_SETMASK: *cur = set; break;
		default: return -EINVAL;
		}
		*cur &= ~(SIGBIT(SIGSYS) | SIGBIT(SIGKILL) | SIGBIT(SIGSTOP));
	}
	if (a[2])
		*(uint64_t *)a[2] = old;
	return 0;
}

/* sigaltstack, kept past the handler's return (which restores the one the
 * thread had when it trapped). */
static long sigaltstack_on_return(ucontext_t *uc, const long *a)
{
	long r = make_call(SYS_sigaltstack, a);
	if (r == 0 && a[0])
		sigaltstack(NULL, &uc->uc_stack);
	return r;
}

/* rt_sigaction: SIGSYS stays the shim's (the program's choice is kept for
 * chaining), and no handler blocks it. */
static long sigaction_trapped(const long *a)
{
	const struct ksigaction *act = (const struct ksigaction *)a[1];
	struct ksigaction *old = (struct ksigaction *)a[2], copy;
	if (a[3] != 8)
		return -EINVAL;
	if (a[0] != SIGSYS) {
		if (act) {
			copy = *act;
			copy.mask &= ~SIGBIT(SIGSYS);
		}
		long b[6] = {a[0], act ? (long)&copy : 0, a[2], a[3]};
		return make_call(SYS_rt_sigaction, b);
	}
	if (old)
		*old = (struct ksigaction){(void *)d.app_sigsys.sa_handler, (unsigned long)d.app_sigsys.sa_flags,
					   NULL, *(uint64_t *)&d.app_sigsys.sa_mask};
	if (act) {
		memset(&d.app_sigsys, 0, sizeof(d.app_sigsys));
		d.app_sigsys.sa_handler = (void (*)(int))act->handler;
		d.app_sigsys.sa_flags = (int)act->flags;
		*(uint64_t *)&d.app_sigsys.sa_mask = act->mask;
	}
	return 0;
}

/* A SIGSYS the dispatch did not cause (seccomp's SECCOMP_RET_TRAP, kill):
 * what the program asked for. */
static void chain(int sig, siginfo_t *si, void *ctx)
{
	struct sigaction app = d.app_sigsys;
	if ((app.sa_flags & SA_SIGINFO) && app.sa_sigaction) {
		app.sa_sigaction(sig, si, ctx);
	} else if (app.sa_handler == SIG_DFL) {
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		REAL(sigaction)(SIGSYS, &dfl, NULL);
		raise(SIGSYS);
	} else if (app.sa_handler != SIG_IGN) {
		app.sa_handler(sig);
	}
}

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	if (si->si_code != SYS_USER_DISPATCH) {
		chain(sig, si, ctx);
		return;
	}
	int saved = errno;
	ucontext_t *uc = ctx;
	greg_t *g = uc->uc_mcontext.gregs;
	long nr = g[REG_RAX], ret;
	long a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	if (si->si_arch != AUDIT_ARCH_X86_64 || nr == SYS_rt_sigreturn || nr == SYS_clone ||
	    nr == SYS_clone3 || nr == SYS_fork || nr == SYS_vfork || nr == SYS_arch_prctl) {
		/* Cannot be made from inside a handler (a new stack, a
		 * different frame, a new thread pointer under the handler's
		 * feet) or another ABI: it runs where it was made,
		 * this thread unguarded until its next call into a hook. All
		 * three instructions (syscall, int $0x80, sysenter) are 2 bytes. */
		dispatch_selector = SYSCALL_DISPATCH_FILTER_ALLOW;
		g[REG_RIP] -= 2;
		errno = saved;
		return;
	}
	if (nr == SYS_rt_sigprocmask)
		ret = sigprocmask_on_return(uc, a);
	else if (nr == SYS_sigaltstack)
		ret = sigaltstack_on_return(uc, a);
	else if (nr == SYS_rt_sigaction)
		ret = sigaction_trapped(a);
	else if (shim_busy || in_range(&d.loader, (uintptr_t)si->si_call_addr) ||
		 !syscall_route(nr, a, &ret))
		ret = make_call(nr, a); /* (the loader's own opens are left alone) */
	else if (ret == -1)
		ret = -errno;
	g[REG_RAX] = ret;
	errno = saved;
}

#endif

void dispatch_thread_on(void)
{
	if (d.on && prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, d.libc.lo,
			  d.libc.hi - d.libc.lo, &dispatch_selector) == 0)
		dispatch_guard();
}

void dispatch_init(void)
{
#ifdef __x86_64__
	const char *env = getenv("STAGEHAND_SYSCALL_DISPATCH");
	if (env && strcmp(env, "0") == 0)
		return;
	if (has_go_code()) {
		shim_log(STG_LOG_DEBUG, "Go code in this program: system calls made without libc are not trapped");
		return;
	}
	if (!text_of(0, (uintptr_t)REAL(syscall), &d.libc)) {
		shim_log(STG_LOG_WARN, "libc's text not found: system calls made without libc are not trapped");
		return;
	}
	uintptr_t ldso = getauxval(AT_BASE);
	if (ldso)
		text_of(ldso, 0, &d.loader);
	if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0) != 0) {
		shim_log(STG_LOG_DEBUG, "no Syscall User Dispatch in this kernel (%s): system calls made "
			 "without libc are not trapped", strerror(errno));
		return;
	}
	struct sigaction sa = {.sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART};
	if (REAL(sigaction)(SIGSYS, NULL, &d.app_sigsys) != 0 || REAL(sigaction)(SIGSYS, &sa, NULL) != 0)
		return;
	sigset_t sys;
	sigemptyset(&sys);
	sigaddset(&sys, SIGSYS);
	REAL(sigprocmask)(SIG_UNBLOCK, &sys, NULL);
	d.on = true;
	dispatch_thread_on();
#endif
}

/* The program's signal calls: SIGSYS stays the shim's and is never blocked. */
SHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (!d.on || (sig != SIGSYS && !act))
		return REAL(sigaction)(sig, act, old);
	if (sig == SIGSYS) {
		if (old)
			*old = d.app_sigsys;
		if (act)
			d.app_sigsys = *act;
		return 0;
	}
	struct sigaction copy = *act;
	sigdelset(&copy.sa_mask, SIGSYS);
	return REAL(sigaction)(sig, &copy, old);
}

SHIM_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	if (!d.on || sig != SIGSYS)
		return REAL(signal)(sig, handler);
	struct sigaction act = {.sa_handler = handler, .sa_flags = SA_RESTART}, old;
	sigaction(SIGSYS, &act, &old);
	return old.sa_handler;
}

static const sigset_t *without_sigsys(int how, const sigset_t *set, sigset_t *copy)
{
	if (!d.on || !set || how == SIG_UNBLOCK)
		return set;
	*copy = *set;
	sigdelset(copy, SIGSYS);
	return copy;
}

SHIM_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t copy;
	return REAL(sigprocmask)(how, without_sigsys(how, set, &copy), old);
}

SHIM_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t copy;
	return REAL(pthread_sigmask)(how, without_sigsys(how, set, &copy), old);
}

/* Every thread the program starts turns the dispatch on for itself. */
struct thread_start {
	void *(*fn)(void *);
	void *arg;
};

static void *start_thread(void *p)
{
	struct thread_start s = *(struct thread_start *)p;
	free(p);
	dispatch_thread_on();
	return s.fn(s.arg);
}

SHIM_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (!d.on)
		return REAL(pthread_create)(t, attr, fn, arg);
	struct thread_start *s = malloc(sizeof(*s));
	if (!s)
		return EAGAIN;
	*s = (struct thread_start){fn, arg};
	int r = REAL(pthread_create)(t, attr, start_thread, s);
	if (r != 0)
		free(s);
	return r;
}
