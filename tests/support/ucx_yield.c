/* ucx_yield: an LD_PRELOAD shim for oversubscribed MPI tests (more ranks than cores).
 * MPICH (ch4:ucx) busy-polls ucp_worker_progress(); with 4 ranks on 2 cores a rank that
 * waits spins through its whole scheduler slice while the rank it waits for cannot run, so
 * an 8 B all-reduce takes milliseconds (docs/testing.md, "The machine"). Yielding the CPU whenever a poll
 * made no progress hands the slice to a rank that can. Test support only: never preloaded
 * into benchmark runs whose times matter; the MPI test scripts use it through MB_UCX_YIELD.
 * Not here: any change of semantics; the real function is always called, its result kept. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

struct ucp_worker;
typedef unsigned (*progress_fn)(struct ucp_worker*);

unsigned ucp_worker_progress(struct ucp_worker* worker) {
  static progress_fn real = NULL;
  progress_fn f = __atomic_load_n(&real, __ATOMIC_RELAXED);
  if (!f) {
    f = (progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
    if (!f) {
      fprintf(stderr, "ucx_yield: ucp_worker_progress not found: %s\n", dlerror());
      abort();
    }
    __atomic_store_n(&real, f, __ATOMIC_RELAXED);
  }
  unsigned n = f(worker);
  if (n == 0) sched_yield();
  return n;
}
