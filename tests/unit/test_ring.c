/* The overwrite ring: order, wrap-around, torn records, concurrent writers and readers. */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flightrec/ring.h"
#include "wd_test_util.h"

/* A record whose fields are functions of (writer, i), so any mix of two records is detected. */
static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static void make_rec(wd_record *r, uint32_t writer, uint32_t i) {
  memset(r, 0, sizeof(*r));
  uint64_t key = ((uint64_t)writer << 32) | i;
  r->turn = 0xdeadbeef; /* ignored by the writer */
  r->a = key;
  r->ts_ns = mix(key);
  r->count = mix(key ^ 0x1234567890abcdefull);
  r->raw = ~key;
  r->slot = i;
  r->parent = ~i;
  r->tid = (int32_t)writer;
  r->peer = (int32_t)(mix(key) & 0x7fffffff);
  r->n = (int32_t)i;
  r->pid = (int32_t)(writer * 7 + 1);
  r->phase = (uint8_t)(key % 3);
  r->type = (uint8_t)(mix(key) >> 56);
  r->state = (uint8_t)i;
  r->flags = (uint8_t)writer;
  r->func = (uint8_t)(i >> 8);
}

/* 1 when r is exactly the record make_rec would write for its own key. */
static int rec_ok(const wd_record *r) {
  wd_record want;
  uint64_t key = r->a;
  make_rec(&want, (uint32_t)(key >> 32), (uint32_t)key);
  want.turn = r->turn;
  want.check = r->check; /* the ring's own hash, verified by wd_ring_snapshot */
  return memcmp(&want, r, sizeof(want)) == 0 && (r->turn & 1) == 0 && r->turn != 0;
}

static void test_capacity(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 0), 0);
  CU_ASSERT_EQUAL(wd_ring_capacity(&r), 16);
  wd_ring_destroy(&r);
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 17), 0);
  CU_ASSERT_EQUAL(wd_ring_capacity(&r), 32);
  wd_ring_destroy(&r);
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 1024), 0);
  CU_ASSERT_EQUAL(wd_ring_capacity(&r), 1024);
  wd_ring_destroy(&r);
  CU_ASSERT_PTR_NULL(r.recs);
}

static void test_empty(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[16];
  uint32_t torn = 99;
  uint64_t lost = 99;
  CU_ASSERT_EQUAL(wd_ring_snapshot(&r, out, 16, &torn, &lost), 0);
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 0);
  /* NULL out-parameters are allowed. */
  CU_ASSERT_EQUAL(wd_ring_snapshot(&r, out, 16, NULL, NULL), 0);
  wd_ring_destroy(&r);
}

/* Records 0..n-1 of that writer, written one after the other. */
static void write_recs(wd_ring *r, uint32_t writer, uint32_t n) {
  wd_record rec;
  for (uint32_t i = 0; i < n; i++) {
    make_rec(&rec, writer, i);
    wd_ring_write(r, &rec);
  }
}

static void test_order(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[16];
  write_recs(&r, 1, 10);
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&r, out, 16, &torn, &lost);
  CU_ASSERT_EQUAL_FATAL(n, 10);
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 0);
  for (uint32_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(out[i].a, ((uint64_t)1 << 32) | i);
    CU_ASSERT_EQUAL(out[i].turn, 2 * (uint64_t)i + 2);
    CU_ASSERT_TRUE(rec_ok(&out[i]));
  }
  /* A smaller buffer gets the newest records, still oldest first. */
  n = wd_ring_snapshot(&r, out, 4, &torn, NULL);
  CU_ASSERT_EQUAL_FATAL(n, 4);
  for (uint32_t i = 0; i < 4; i++) CU_ASSERT_EQUAL(out[i].n, (int32_t)(6 + i));
  wd_ring_destroy(&r);
}

static void test_wrap(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[32];
  write_recs(&r, 2, 37);
  CU_ASSERT_EQUAL(atomic_load(&r.head), 37);
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&r, out, 32, &torn, &lost);
  CU_ASSERT_EQUAL_FATAL(n, 16);
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 37 - 16);
  for (uint32_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(out[i].n, (int32_t)(21 + i));
    CU_ASSERT_EQUAL(out[i].turn, 2 * (uint64_t)(21 + i) + 2);
    CU_ASSERT_TRUE(rec_ok(&out[i]));
  }
  wd_ring_destroy(&r);
}

/* A ring file's ring is backed in part until the watchdog allocates the rest: records wrap
 * within that part, so the newest are kept, and nothing is ever stored beyond it. */
static void test_backed_part(void) {
  wd_record *mem = calloc(64, sizeof(wd_record));
  CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
  wd_ring r;
  wd_ring_init_at(&r, 64, mem, 16);
  write_recs(&r, 1, 40);
  for (uint32_t i = 16; i < 64; i++) CU_ASSERT_EQUAL(mem[i].turn, 0); /* beyond: untouched */
  wd_record out[64];
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&r, out, 64, &torn, &lost);
  CU_ASSERT_EQUAL_FATAL(n, 16); /* the newest 16: 24..39 */
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 24);
  for (uint32_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(out[i].n, (int32_t)(24 + i));
    CU_ASSERT_TRUE(rec_ok(&out[i]));
  }
  /* The rest allocated: later tickets use the whole ring, the earlier ones stay where they are. */
  wd_ring_ready(&r, 64);
  write_recs(&r, 1, 10);
  n = wd_ring_snapshot(&r, out, 64, &torn, &lost);
  CU_ASSERT_EQUAL_FATAL(n, 26); /* 24..39 from before, then the 10 new ones */
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 24);
  for (uint32_t i = 0; i < 16; i++) CU_ASSERT_EQUAL(out[i].turn, 2 * (uint64_t)(24 + i) + 2);
  for (uint32_t i = 16; i < n; i++) CU_ASSERT_EQUAL(out[i].turn, 2 * (uint64_t)(40 + i - 16) + 2);
  /* The watchdog held up between its two stores (ready_from, then ready): a writer meanwhile
   * still wraps within the old size, and the reader finds its records there. */
  wd_ring_destroy(&r);
  memset(mem, 0, 64 * sizeof(wd_record));
  wd_ring_init_at(&r, 64, mem, 16);
  write_recs(&r, 1, 20);
  atomic_store(&r.ready_from, atomic_load(&r.head));
  write_recs(&r, 2, 5); /* tickets 20..24, at 4..8 */
  atomic_store(&r.ready, 64);
  n = wd_ring_snapshot(&r, out, 64, &torn, &lost);
  CU_ASSERT_EQUAL(n, 16); /* 9..24: the newest 16 of the small ring */
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(out[n - 1].turn, 2 * (uint64_t)24 + 2);
  write_recs(&r, 1, 64 + 25); /* a lap on the grown ring */
  /* A whole lap later the early part is gone, counted lost. */
  n = wd_ring_snapshot(&r, out, 64, &torn, &lost);
  CU_ASSERT_EQUAL(n, 64);
  CU_ASSERT_EQUAL(lost, 114 - 64);
  CU_ASSERT_EQUAL(out[0].turn, 2 * (uint64_t)50 + 2);
  wd_ring_destroy(&r);
  free(mem);
}

/* A writer inside a slot leaves its turn odd; a slot already taken by a newer ticket has a turn
 * that does not match the ticket the reader expects. Both are skipped and counted. */
/* Two writers a lap apart inside one slot leave a mix behind a complete-looking turn: the
 * record's check rejects it. */
static void test_mixed_lap(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[16];
  write_recs(&r, 3, 16);
  uint32_t torn;
  uint64_t lost;
  CU_ASSERT_EQUAL(wd_ring_snapshot(&r, out, 16, &torn, &lost), 16);
  CU_ASSERT_EQUAL(torn, 0);
  r.recs[7].count ^= 1;     /* one word from the other writer */
  r.recs[11].channel ^= 0x80; /* a byte of the last word, next to the check */
  CU_ASSERT_EQUAL(wd_ring_snapshot(&r, out, 16, &torn, &lost), 14);
  CU_ASSERT_EQUAL(torn, 2);
  for (uint32_t i = 0; i < 14; i++) CU_ASSERT_TRUE(out[i].n != 7 && out[i].n != 11);
  wd_ring_destroy(&r);
}

static void test_torn(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[16];
  write_recs(&r, 3, 16);
  r.recs[5].turn = 2 * 5 + 1;         /* writer of ticket 5 still inside */
  r.recs[9].turn = 2 * (9 + 16) + 1;  /* writer of ticket 25 already inside */
  r.recs[12].turn = 2 * (12 + 16) + 2; /* overwritten after head was read */
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&r, out, 16, &torn, &lost);
  CU_ASSERT_EQUAL(n, 13);
  CU_ASSERT_EQUAL(torn, 2);
  CU_ASSERT_EQUAL(lost, 1); /* ticket 12 is gone for good: lost, not torn */
  int has5 = 0, order = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (out[i].n == 5 || out[i].n == 9 || out[i].n == 12) has5 = 1;
    if (i > 0 && out[i].n <= out[i - 1].n) order = 0;
    CU_ASSERT_TRUE(rec_ok(&out[i]));
  }
  CU_ASSERT_FALSE(has5);
  CU_ASSERT_TRUE(order);
  /* The writer finishes: the slot is readable again. */
  r.recs[5].turn = 2 * 5 + 2;
  n = wd_ring_snapshot(&r, out, 16, &torn, &lost);
  CU_ASSERT_EQUAL(n, 14);
  CU_ASSERT_EQUAL(torn, 1);
  wd_ring_destroy(&r);
}

/* A recycled communicator's rings start over empty. */
static void test_clear(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[16];
  write_recs(&r, 4, 40);
  wd_ring_clear(&r);
  uint32_t torn = 9;
  uint64_t lost = 9;
  CU_ASSERT_EQUAL(wd_ring_snapshot(&r, out, 16, &torn, &lost), 0);
  CU_ASSERT_EQUAL(torn, 0);
  CU_ASSERT_EQUAL(lost, 0);
  /* Tickets restart at 0: old slot contents never pass for new records. */
  write_recs(&r, 5, 1);
  uint32_t n = wd_ring_snapshot(&r, out, 16, &torn, &lost);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_EQUAL(out[0].a, (uint64_t)5 << 32);
  CU_ASSERT_EQUAL(out[0].turn, 2);
  CU_ASSERT_EQUAL(torn, 0);
  wd_ring_destroy(&r);
}

enum { NWRITERS = 4, PER_WRITER = 100000, RING_CAP = 256 };

typedef struct {
  wd_ring *r;
  uint32_t id;
} writer_arg;

static _Atomic int writers_done;

static void *writer(void *argp) {
  writer_arg *a = argp;
  wd_record rec;
  for (uint32_t i = 0; i < PER_WRITER; i++) {
    make_rec(&rec, a->id, i);
    wd_ring_write(a->r, &rec);
  }
  atomic_fetch_add(&writers_done, 1);
  return NULL;
}

static void test_concurrent(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, RING_CAP), 0);
  pthread_t t[NWRITERS];
  writer_arg args[NWRITERS];
  atomic_store(&writers_done, 0);
  for (uint32_t i = 0; i < NWRITERS; i++) {
    args[i] = (writer_arg){.r = &r, .id = i + 1};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, writer, &args[i]), 0);
  }
  wd_record *out = calloc(RING_CAP, sizeof(*out));
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  uint64_t snaps = 0, records = 0, bad = 0, misorder = 0, torn_total = 0, lost_back = 0;
  uint64_t prev_lost = 0;
  /* At least one snapshot with records, even when the writers finish first. */
  while (atomic_load(&writers_done) < NWRITERS || records == 0) {
    uint32_t torn;
    uint64_t lost;
    uint32_t n = wd_ring_snapshot(&r, out, RING_CAP, &torn, &lost);
    snaps++;
    records += n;
    torn_total += torn;
    if (lost < prev_lost) lost_back++;
    prev_lost = lost;
    int32_t last[NWRITERS + 1] = {-1, -1, -1, -1, -1};
    uint64_t last_turn = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (!rec_ok(&out[i])) {
        bad++;
        continue;
      }
      uint32_t w = (uint32_t)(out[i].a >> 32);
      if (w < 1 || w > NWRITERS) {
        bad++;
        continue;
      }
      /* Tickets increase through a snapshot, and so does each writer's own sequence. */
      if (out[i].turn <= last_turn || out[i].n <= last[w]) misorder++;
      last_turn = out[i].turn;
      last[w] = out[i].n;
    }
  }
  for (uint32_t i = 0; i < NWRITERS; i++) pthread_join(t[i], NULL);
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(misorder, 0);
  CU_ASSERT_EQUAL(lost_back, 0);
  CU_ASSERT_TRUE(snaps > 0 && records > 0);
  /* Quiescent: the last RING_CAP tickets, each readable, except a slot two writers of different
   * laps wrote at once (a writer preempted for a whole lap: on a loaded machine, under TSan):
   * its check rejects it (torn), never a mixed record; at most one such slot per writer. */
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&r, out, RING_CAP, &torn, &lost);
  CU_ASSERT_EQUAL(n + torn, RING_CAP);
  CU_ASSERT_TRUE(torn <= NWRITERS);
  CU_ASSERT_EQUAL(lost, (uint64_t)NWRITERS * PER_WRITER - RING_CAP);
  int ok = 1;
  uint64_t prev = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!rec_ok(&out[i]) || out[i].turn <= prev || out[i].turn < 2 * lost + 2 ||
        out[i].turn > 2 * (lost + RING_CAP) + 2)
      ok = 0;
    prev = out[i].turn;
  }
  CU_ASSERT_TRUE(ok);
  if (torn) fprintf(stderr, "test_ring: %u lap-mixed record(s) rejected (a writer preempted for a lap)\n", torn);
  free(out);
  wd_ring_destroy(&r);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("ring", NULL, NULL);
  CU_add_test(s, "capacity rounding", test_capacity);
  CU_add_test(s, "empty ring", test_empty);
  CU_add_test(s, "oldest first", test_order);
  CU_add_test(s, "wrap-around counts lost records", test_wrap);
  CU_add_test(s, "a partly backed ring keeps its newest records", test_backed_part);
  CU_add_test(s, "torn records are skipped", test_torn);
  CU_add_test(s, "a lap-mixed record is rejected by its check", test_mixed_lap);
  CU_add_test(s, "clear", test_clear);
  CU_add_test(s, "concurrent writers and a reader", test_concurrent);
  return wd_test_run();
}
