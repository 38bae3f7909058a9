/* SPDX-License-Identifier: MIT */
/* Resolves the libc functions behind the shim's wrappers with dlsym(RTLD_NEXT). */
#include "real.h"

#include <dlfcn.h>
#include <pthread.h>

#define HOOK(name, ret, params) ret(*real_##name) params;
#include "hooks.def"
#undef HOOK

static void resolve(void)
{
#define HOOK(name, ret, params) real_##name = (ret(*) params)dlsym(RTLD_NEXT, #name);
#include "hooks.def"
#undef HOOK
}

int shim_real_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, resolve);
	/* Old glibc lacks some (close_range, statx, __open_2 on very old ones);
	 * their wrappers return ENOSYS then. These must exist. */
	return real_open && real_openat && real_close && real_fstat && real_dup2 ? 0 : -1;
}
