/* The chunked event pool: FIFO reuse, growth by chunks, the maximum, handles and tags, threads. */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "events/blacklist.h"
#include "events/event.h"
#include "events/pool.h"
#include "wd_test_util.h"

static wd_event *alloc_pub(wd_pool *p) {
  wd_event *ev = wd_pool_alloc(p, 1);
  if (ev) wd_event_publish(ev);
  return ev;
}

static wd_event *alloc_pub_by(wd_pool *p, uint32_t tid) {
  wd_event *ev = wd_pool_alloc(p, tid);
  if (ev) wd_event_publish(ev);
  return ev;
}

static void test_init_layout(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 1, 1, 0, NULL, 0), 0);
  /* Both bounds round up to one whole chunk. */
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(p.max_chunks, 1);
  CU_ASSERT_EQUAL(sizeof(wd_event) % WD_EVENT_ALIGN, 0);
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) {
    wd_event *ev = wd_pool_slot(&p, i);
    if (ev->slot_id != i || ((uintptr_t)ev & (WD_EVENT_ALIGN - 1)) != 0 || ev->pool != &p ||
        atomic_load(&ev->live) != 0) {
      CU_FAIL("slot layout");
      break;
    }
  }
  wd_pool_destroy(&p);

  /* The id base is OR'ed into every id (detach pool). */
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, 2 * WD_CHUNK_SLOTS, WD_SLOT_DETACHED_BIT, NULL, 0), 0);
  wd_event *ev = alloc_pub(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
  CU_ASSERT_EQUAL(ev->slot_id, WD_SLOT_DETACHED_BIT | 0u);
  CU_ASSERT_EQUAL(atomic_load(&ev->live), 1);
  CU_ASSERT_EQUAL(atomic_load(&ev->seq) & 1, 0);
  wd_pool_free(&p, ev, 1);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), WD_CHUNK_SLOTS);
  wd_pool_destroy(&p);
}

static void test_alloc_marks_initialising(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, 0, 0, NULL, 0), 0);
  wd_event *ev = wd_pool_alloc(&p, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
  /* Readers must see an odd seq until the owner publishes the slot. */
  CU_ASSERT_EQUAL(atomic_load(&ev->seq) & 1, 1);
  CU_ASSERT_EQUAL(atomic_load(&ev->live), 1);
  wd_event_publish(ev);
  CU_ASSERT_EQUAL(atomic_load(&ev->seq) & 1, 0);
  wd_pool_free(&p, ev, 1);
  CU_ASSERT_EQUAL(atomic_load(&ev->live), 0);
  wd_pool_destroy(&p);
}

/* A freed slot goes to the end of the free queue: every other free slot is handed out first. */
static void test_fifo_reuse(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, WD_CHUNK_SLOTS, WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  wd_event *first = alloc_pub(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(first);
  CU_ASSERT_EQUAL(first->slot_id, 0);
  wd_pool_free(&p, first, 1);
  wd_event **held = calloc(WD_CHUNK_SLOTS, sizeof(*held));
  CU_ASSERT_PTR_NOT_NULL_FATAL(held);
  int reused_early = 0, order_ok = 1;
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS - 1; i++) {
    held[i] = alloc_pub(&p);
    if (held[i] == NULL) {
      CU_FAIL("pool ran dry");
      break;
    }
    if (held[i] == first) reused_early = 1;
    if (held[i]->slot_id != i + 1) order_ok = 0;
  }
  CU_ASSERT_FALSE(reused_early);
  CU_ASSERT_TRUE(order_ok);
  /* Only now does the freed slot come back. */
  wd_event *again = alloc_pub(&p);
  CU_ASSERT_PTR_EQUAL(again, first);

  /* Several frees come back in the order they were freed. */
  wd_pool_free(&p, held[500], 1);
  wd_pool_free(&p, held[7], 1);
  wd_pool_free(&p, held[900], 1);
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), held[500]);
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), held[7]);
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), held[900]);
  free(held);
  wd_pool_destroy(&p);
}

/* An empty queue grows the pool by one whole chunk; the maximum turns allocations into drops. */
static void test_growth_and_max(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, WD_CHUNK_SLOTS, 3 * WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), WD_CHUNK_SLOTS);
  uint32_t total = 3 * WD_CHUNK_SLOTS;
  wd_event **all = calloc(total, sizeof(*all));
  uint8_t *seen = calloc(total, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) all[i] = alloc_pub(&p);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), 0);
  /* The next allocation adds exactly one chunk. */
  all[WD_CHUNK_SLOTS] = alloc_pub(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all[WD_CHUNK_SLOTS]);
  CU_ASSERT_EQUAL(all[WD_CHUNK_SLOTS]->slot_id, WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), 2 * WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), WD_CHUNK_SLOTS - 1);
  for (uint32_t i = WD_CHUNK_SLOTS + 1; i < total; i++) all[i] = alloc_pub(&p);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), total);
  CU_ASSERT_EQUAL(atomic_load(&p.exhausted), 0);
  int unique = 1, nonnull = 1;
  for (uint32_t i = 0; i < total; i++) {
    if (all[i] == NULL) {
      nonnull = 0;
      continue;
    }
    uint32_t id = all[i]->slot_id;
    if (id >= total || seen[id]) unique = 0;
    else seen[id] = 1;
    if (wd_pool_slot(&p, id) != all[i]) unique = 0;
  }
  CU_ASSERT_TRUE(nonnull);
  CU_ASSERT_TRUE(unique);
  /* At the maximum: NULL, counted, no growth. */
  CU_ASSERT_PTR_NULL(wd_pool_alloc(&p, 1));
  CU_ASSERT_PTR_NULL(wd_pool_alloc(&p, 1));
  CU_ASSERT_EQUAL(atomic_load(&p.exhausted), 2);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), total);
  /* A free makes room again, without touching the drop count. */
  wd_pool_free(&p, all[1234], 1);
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), all[1234]);
  CU_ASSERT_EQUAL(atomic_load(&p.exhausted), 2);
  for (uint32_t i = 0; i < total; i++) wd_pool_free(&p, all[i], 1);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), total);
  free(all);
  free(seen);
  wd_pool_destroy(&p);
}

static void test_reserve(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, 2 * WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  wd_pool_reserve(&p, 10); /* enough free: no-op */
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), WD_CHUNK_SLOTS);
  wd_pool_reserve(&p, WD_CHUNK_SLOTS + 1);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), 2 * WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), 2 * WD_CHUNK_SLOTS);
  wd_pool_reserve(&p, 4 * WD_CHUNK_SLOTS); /* at the maximum: stays */
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), 2 * WD_CHUNK_SLOTS);
  wd_pool_destroy(&p);
}

static void test_owns(void) {
  wd_pool p, q;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 2 * WD_CHUNK_SLOTS, 2 * WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&q, 0, 0, 0, NULL, 0), 0);
  wd_event *s0 = wd_pool_slot(&p, 0);
  wd_event *last = wd_pool_slot(&p, WD_CHUNK_SLOTS - 1);
  wd_event *c1 = wd_pool_slot(&p, WD_CHUNK_SLOTS + 17);
  CU_ASSERT_TRUE(wd_pool_owns(&p, s0));
  CU_ASSERT_TRUE(wd_pool_owns(&p, (char *)s0 + 5)); /* a tagged handle */
  CU_ASSERT_TRUE(wd_pool_owns(&p, wd_event_handle(s0)));
  CU_ASSERT_TRUE(wd_pool_owns(&p, last));
  /* Inside a slot but not a slot address (nor one with a tag): not a handle of ours. */
  CU_ASSERT_FALSE(wd_pool_owns(&p, (char *)last + sizeof(wd_event) - 1));
  CU_ASSERT_TRUE(wd_pool_owns(&p, c1));
  int local;
  CU_ASSERT_FALSE(wd_pool_owns(&p, &local));
  CU_ASSERT_FALSE(wd_pool_owns(&p, NULL));
  CU_ASSERT_FALSE(wd_pool_owns(&p, (void *)0x10));
  CU_ASSERT_FALSE(wd_pool_owns(&p, wd_pool_slot(&q, 3)));
  CU_ASSERT_FALSE(wd_pool_owns(&q, s0));
  /* One past the end of the first chunk belongs to it only if the next chunk happens to start
   * there; the start of chunk 0 minus one never does. */
  CU_ASSERT_FALSE(wd_pool_owns(&p, (char *)s0 - 1));
  wd_pool_destroy(&q);
  wd_pool_destroy(&p);
}

/* The tag in a handle's low bits changes on every free: old handles stop resolving. */
static void test_handles_and_tags(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, 0, 0, NULL, 0), 0);
  CU_ASSERT_PTR_NULL(wd_event_from_handle(NULL));
  wd_event **all = calloc(WD_CHUNK_SLOTS, sizeof(*all));
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) all[i] = alloc_pub(&p);
  wd_event *ev = all[42];
  void *h1 = wd_event_handle(ev);
  CU_ASSERT_PTR_EQUAL((void *)((uintptr_t)h1 & ~(uintptr_t)WD_TAG_MASK), ev);
  CU_ASSERT_PTR_EQUAL(wd_event_from_handle(h1), ev);
  uint32_t tag = atomic_load(&ev->tag);
  wd_pool_free(&p, ev, 1);
  CU_ASSERT_EQUAL(atomic_load(&ev->tag), tag + 1);
  CU_ASSERT_PTR_NULL(wd_event_from_handle(h1)); /* freed */
  /* The pool is otherwise full, so the same slot comes back at once, with a new tag. */
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), ev);
  void *h2 = wd_event_handle(ev);
  CU_ASSERT_PTR_NOT_EQUAL(h1, h2);
  CU_ASSERT_PTR_NULL(wd_event_from_handle(h1)); /* stale: live slot, other incarnation */
  CU_ASSERT_PTR_EQUAL(wd_event_from_handle(h2), ev);
  /* Tags cycle through 64 values, so a handle is recognised as stale for 63 reuses. */
  int stale_ok = 1;
  for (int i = 0; i < 62; i++) {
    wd_pool_free(&p, ev, 1);
    if (alloc_pub(&p) != ev) stale_ok = 0;
    if (wd_event_from_handle(h2) != NULL) stale_ok = 0;
  }
  CU_ASSERT_TRUE(stale_ok);
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) wd_pool_free(&p, all[i], 1);
  free(all);
  wd_pool_destroy(&p);
}

/* A finalized communicator's pool is recycled: chunks kept, every slot free, old handles stale. */
static void test_recycle(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, 2 * WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  void *h[WD_CHUNK_SLOTS + 10];
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS + 10; i++) {
    wd_event *ev = alloc_pub(&p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
    h[i] = ev ? wd_event_handle(ev) : NULL; /* GCC cannot see that the FATAL check returned */
  }
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), 2 * WD_CHUNK_SLOTS);
  wd_pool_free(&p, wd_event_from_handle(h[3]), 1); /* some free, most live */
  wd_event *s0 = wd_pool_slot(&p, 0), *s1k = wd_pool_slot(&p, WD_CHUNK_SLOTS);
  wd_pool_recycle(&p);
  CU_ASSERT_EQUAL(wd_pool_nslots(&p), 2 * WD_CHUNK_SLOTS);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), 2 * WD_CHUNK_SLOTS);
  CU_ASSERT_PTR_EQUAL(wd_pool_slot(&p, 0), s0);
  CU_ASSERT_PTR_EQUAL(wd_pool_slot(&p, WD_CHUNK_SLOTS), s1k);
  int stale = 1, free_all = 1;
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS + 10; i++)
    if (wd_event_from_handle(h[i]) != NULL) stale = 0;
  for (uint32_t i = 0; i < wd_pool_nslots(&p); i++)
    if (atomic_load(&wd_pool_slot(&p, i)->live) != 0) free_all = 0;
  CU_ASSERT_TRUE(stale);
  CU_ASSERT_TRUE(free_all);
  /* Allocation starts over in slot order, with new tags, and every slot comes out once. */
  uint8_t *seen = calloc(wd_pool_nslots(&p), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
  int unique = 1, order = 1;
  for (uint32_t i = 0; i < wd_pool_nslots(&p); i++) {
    wd_event *ev = alloc_pub(&p);
    if (ev == NULL || seen[ev->slot_id]) {
      unique = 0;
      break;
    }
    seen[ev->slot_id] = 1;
    if (ev->slot_id != i) order = 0;
  }
  CU_ASSERT_TRUE(unique);
  CU_ASSERT_TRUE(order);
  CU_ASSERT_PTR_NULL(wd_pool_alloc(&p, 1));
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS + 10; i++) CU_ASSERT_PTR_NULL(wd_event_from_handle(h[i]));
  free(seen);
  wd_pool_destroy(&p);
}

/* A slot whose address is blacklisted goes back to the end of the queue instead of out. */
static void test_blacklist_skips(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, WD_CHUNK_SLOTS, 0, 0, NULL, 0), 0);
  wd_blacklist *bl = wd_blacklist_create(16);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  p.blacklist = bl;
  wd_event *s0 = wd_pool_slot(&p, 0), *s1 = wd_pool_slot(&p, 1);
  wd_blacklist_ref(bl, (uintptr_t)s0);
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), s1);
  CU_ASSERT_EQUAL(atomic_load(&s0->live), 0);
  wd_blacklist_unref(bl, (uintptr_t)s0);
  /* s0 went to the end: slots 2..1023 come first. */
  wd_event *ev = NULL;
  for (uint32_t i = 2; i < WD_CHUNK_SLOTS; i++) ev = alloc_pub(&p);
  CU_ASSERT_PTR_EQUAL(ev, wd_pool_slot(&p, WD_CHUNK_SLOTS - 1));
  CU_ASSERT_PTR_EQUAL(alloc_pub(&p), s0);
  p.blacklist = NULL;
  wd_blacklist_destroy(bl);
  wd_pool_destroy(&p);
}

/* Four threads allocate and free in bursts; an owner flag per slot catches a slot handed to two
 * owners at once. */
enum { NTHREADS = 4, ITERS = 400, BURST = 300, MAXSLOTS = 4 * WD_CHUNK_SLOTS };
static _Atomic int owner[MAXSLOTS];

typedef struct {
  wd_pool *p;
  int id;
  int dup, bad, drops;
} worker_arg;

static void *worker(void *argp) {
  worker_arg *a = argp;
  wd_event *mine[BURST];
  unsigned x = (unsigned)a->id * 2654435761u;
  for (int it = 0; it < ITERS; it++) {
    x = x * 1103515245u + 12345u;
    int n = 1 + (int)((x >> 8) % BURST);
    int got = 0;
    for (int i = 0; i < n; i++) {
      wd_event *ev = wd_pool_alloc(a->p, (uint32_t)a->id);
      if (ev == NULL) {
        a->drops++;
        continue;
      }
      wd_event_publish(ev);
      if (ev->slot_id >= MAXSLOTS || !wd_pool_owns(a->p, ev)) {
        a->bad++;
        continue;
      }
      int prev = atomic_exchange(&owner[ev->slot_id], a->id);
      if (prev != 0) a->dup++;
      if (atomic_load(&ev->live) != 1 || (atomic_load(&ev->seq) & 1)) a->bad++;
      mine[got++] = ev;
    }
    for (int i = got - 1; i >= 0; i--) {
      int prev = atomic_exchange(&owner[mine[i]->slot_id], 0);
      if (prev != a->id) a->dup++;
      wd_pool_free(a->p, mine[i], (uint32_t)a->id);
    }
  }
  return NULL;
}

static void threads_run(int owned) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, 0, MAXSLOTS, 0, NULL, owned), 0);
  pthread_t t[NTHREADS];
  worker_arg args[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i] = (worker_arg){.p = &p, .id = i + 1};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  }
  int drops = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(t[i], NULL);
    CU_ASSERT_EQUAL(args[i].dup, 0);
    CU_ASSERT_EQUAL(args[i].bad, 0);
    drops += args[i].drops;
  }
  /* 4 x 300 slots at most live at once: the pool never needs its maximum. */
  CU_ASSERT_EQUAL(drops, (int)atomic_load(&p.exhausted));
  CU_ASSERT_TRUE(wd_pool_nslots(&p) <= MAXSLOTS);
  /* Free: in the queue, or kept by the owner (one of the workers, for an owned pool). */
  CU_ASSERT_EQUAL(wd_pool_nfree(&p) + atomic_load(&p.nstack), wd_pool_nslots(&p));
  CU_ASSERT_TRUE(owned ? atomic_load(&p.owner) >= 1 && atomic_load(&p.owner) <= NTHREADS
                       : atomic_load(&p.nstack) == 0);
  int all_free = 1;
  for (uint32_t i = 0; i < wd_pool_nslots(&p); i++)
    if (atomic_load(&wd_pool_slot(&p, i)->live) != 0 || atomic_load(&owner[i]) != 0) all_free = 0;
  CU_ASSERT_TRUE(all_free);
  /* Every slot is still handed out exactly once when drained. */
  uint32_t n = wd_pool_nslots(&p);
  uint8_t *seen = calloc(n, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
  int unique = 1;
  uint32_t tid = owned ? atomic_load(&p.owner) : 1; /* the owner drains its stack too */
  for (uint32_t i = 0; i < n; i++) {
    wd_event *ev = wd_pool_alloc(&p, tid);
    if (ev == NULL || ev->slot_id >= n || seen[ev->slot_id]) {
      unique = 0;
      break;
    }
    seen[ev->slot_id] = 1;
  }
  CU_ASSERT_TRUE(unique);
  free(seen);
  wd_pool_destroy(&p);
}

static void test_threads(void) { threads_run(0); }
static void test_threads_owned(void) { threads_run(1); }

/* An owned pool: the thread that frees a slot first keeps its last frees at hand and takes them
 * back last-in first-out, without the queue; any other thread's free goes to the queue. */
static void test_owner_stack(void) {
  wd_pool p;
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, WD_CHUNK_SLOTS, WD_CHUNK_SLOTS, 0, NULL, 1), 0);
  CU_ASSERT_EQUAL(atomic_load(&p.owner), 0);
  wd_event *a = alloc_pub(&p), *b = alloc_pub(&p), *c = alloc_pub(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  uint32_t nfree = wd_pool_nfree(&p);
  uint32_t tag = atomic_load(&a->tag);
  wd_pool_free(&p, a, 7); /* thread 7 claims the pool */
  CU_ASSERT_EQUAL(atomic_load(&p.owner), 7);
  wd_pool_free(&p, b, 7);
  CU_ASSERT_EQUAL(atomic_load(&p.nstack), 2);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), nfree); /* kept, not queued */
  CU_ASSERT_EQUAL(atomic_load(&a->live), 0);
  CU_ASSERT_EQUAL(atomic_load(&a->tag), tag + 1); /* its handles are stale at once */
  wd_pool_free(&p, c, 8);                         /* another thread: to the queue */
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), nfree + 1);
  CU_ASSERT_EQUAL(atomic_load(&p.owner), 7);
  /* The owner takes back its last free first; another thread takes from the queue. */
  wd_event *x = wd_pool_alloc(&p, 7);
  CU_ASSERT_PTR_EQUAL(x, b);
  CU_ASSERT_EQUAL(atomic_load(&x->seq) & 1, 1); /* initialising, as from the queue */
  CU_ASSERT_EQUAL(atomic_load(&x->live), 1);
  wd_event_publish(x);
  wd_event *y = wd_pool_alloc(&p, 8);
  CU_ASSERT_PTR_NOT_EQUAL(y, a);
  wd_event_publish(y);
  CU_ASSERT_PTR_EQUAL(alloc_pub_by(&p, 7), a);
  CU_ASSERT_EQUAL(atomic_load(&p.nstack), 0);
  /* Bounded: beyond WD_POOL_STACK the owner's frees go to the queue too. */
  wd_event *held[WD_POOL_STACK + 3];
  for (uint32_t i = 0; i < WD_POOL_STACK + 3; i++) held[i] = alloc_pub(&p);
  nfree = wd_pool_nfree(&p);
  for (uint32_t i = 0; i < WD_POOL_STACK + 3; i++) wd_pool_free(&p, held[i], 7);
  CU_ASSERT_EQUAL(atomic_load(&p.nstack), WD_POOL_STACK);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), nfree + 3);
  /* Recycling puts the kept slots back in the queue and frees the pool from its owner. */
  wd_pool_recycle(&p);
  CU_ASSERT_EQUAL(atomic_load(&p.nstack), 0);
  CU_ASSERT_EQUAL(atomic_load(&p.owner), 0);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), WD_CHUNK_SLOTS);
  wd_pool_destroy(&p);
  /* An unowned pool (an operation pool) never keeps slots back. */
  CU_ASSERT_EQUAL_FATAL(wd_pool_init(&p, WD_CHUNK_SLOTS, WD_CHUNK_SLOTS, 0, NULL, 0), 0);
  wd_event *z = alloc_pub(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(z);
  wd_pool_free(&p, z, 7);
  CU_ASSERT_EQUAL(atomic_load(&p.owner), WD_POOL_NO_OWNER);
  CU_ASSERT_EQUAL(atomic_load(&p.nstack), 0);
  CU_ASSERT_EQUAL(wd_pool_nfree(&p), WD_CHUNK_SLOTS);
  wd_pool_destroy(&p);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("pool", NULL, NULL);
  CU_add_test(s, "init and slot layout", test_init_layout);
  CU_add_test(s, "alloc marks the slot initialising", test_alloc_marks_initialising);
  CU_add_test(s, "fifo reuse", test_fifo_reuse);
  CU_add_test(s, "growth by chunks and maximum", test_growth_and_max);
  CU_add_test(s, "reserve", test_reserve);
  CU_add_test(s, "owns", test_owns);
  CU_add_test(s, "handles and tags", test_handles_and_tags);
  CU_add_test(s, "recycle", test_recycle);
  CU_add_test(s, "blacklisted slots are skipped", test_blacklist_skips);
  CU_add_test(s, "threads", test_threads);
  CU_add_test(s, "the owner's stack", test_owner_stack);
  CU_add_test(s, "threads, owned pool", test_threads_owned);
  return wd_test_run();
}
