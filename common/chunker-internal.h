/* SPDX-License-Identifier: MIT */
/* The chunker's knob for its tests and bench/cdc. */
#pragma once
#include <stdbool.h>

/* Scans with the CPU's vector instructions (on, the default where there are
 * any) or 8 bytes at a time (off). Returns whether vectors are in use. Not
 * thread-safe: for tests and benchmarks, before any chunking. */
bool stg_chunker_use_simd(bool on);
