/* The flight recorder's file-backed mapping (ringfile.h). */
#include "flightrec/ringfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flightrec/strtab.h"

static _Atomic unsigned wd_rf_counter;
static uint64_t wd_rf_process_start;

/* Open files, for strings interned while they live (few files, a string now and then). */
#define WD_RF_OPEN_MAX 1024
static pthread_mutex_t wd_rf_lock = PTHREAD_MUTEX_INITIALIZER;
static void *wd_rf_open[WD_RF_OPEN_MAX];
static unsigned wd_rf_answered; /* the last episode noted: a file opened later carries it too */

static void wd_rf_put_one(void *base, unsigned id, const char *text) {
  char *dst = (char *)base + WD_RF_HEADER_BYTES + (size_t)id * WD_RF_STRLEN;
  size_t len = strnlen(text, WD_RF_STRLEN - 1);
  memcpy(dst, text, len);
  memset(dst + len, 0, WD_RF_STRLEN - len);
}

void wd_ringfile_note_string(unsigned id, const char *text) {
  if (id >= WD_RF_STRINGS) return;
  pthread_mutex_lock(&wd_rf_lock);
  for (unsigned i = 0; i < WD_RF_OPEN_MAX; i++) {
    void *base = __atomic_load_n(&wd_rf_open[i], __ATOMIC_ACQUIRE);
    if (base) wd_rf_put_one(base, id, text);
  }
  pthread_mutex_unlock(&wd_rf_lock);
}

void wd_ringfile_note_fatal(const wd_rf_fatal *f) {
  /* No lock: a handler may have interrupted a thread holding it. A file closed meanwhile is
   * still mapped until munmap, which the registry's removal precedes. */
  for (unsigned i = 0; i < WD_RF_OPEN_MAX; i++) {
    wd_rf_header *h = __atomic_load_n(&wd_rf_open[i], __ATOMIC_ACQUIRE);
    if (!h) continue;
    h->fatal = *f;
    h->fatal_sum = wd_rf_fnv(&h->fatal, sizeof h->fatal);
  }
}

void wd_ringfile_note_answer(unsigned k) {
  pthread_mutex_lock(&wd_rf_lock);
  wd_rf_answered = k;
  for (unsigned i = 0; i < WD_RF_OPEN_MAX; i++) {
    wd_rf_header *h = __atomic_load_n(&wd_rf_open[i], __ATOMIC_ACQUIRE);
    if (h) __atomic_store_n(&h->answered_k, k, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&wd_rf_lock);
}

static void wd_rf_register(void *base, int add) {
  pthread_mutex_lock(&wd_rf_lock);
  for (unsigned i = 0; i < WD_RF_OPEN_MAX; i++) {
    if (add && !wd_rf_open[i]) {
      __atomic_store_n(&wd_rf_open[i], base, __ATOMIC_RELEASE);
      unsigned n = wd_str_count();
      for (unsigned k = 1; k < n && k < WD_RF_STRINGS; k++) wd_rf_put_one(base, k, wd_str((uint8_t)k));
      __atomic_store_n(&((wd_rf_header *)base)->answered_k, wd_rf_answered, __ATOMIC_RELEASE);
      break;
    }
    if (!add && wd_rf_open[i] == base) {
      __atomic_store_n(&wd_rf_open[i], NULL, __ATOMIC_RELEASE);
      break;
    }
  }
  pthread_mutex_unlock(&wd_rf_lock);
}

static uint64_t wd_rf_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t wd_rf_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* mkdir -p for the last two components, private; an existing directory must be ours. */
static int wd_rf_mkdir(const char *dir) {
  char parent[512];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = '\0';
    if (mkdir(parent, 0700) != 0 && errno != EEXIST) return -1;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (lstat(dir, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    errno = EPERM;
    return -1;
  }
  return 0;
}

static char wd_rf_boot_id[40];
static uint64_t wd_rf_pidns;

void wd_ringfile_set_process(uint64_t start_wall_ns, const char *boot_id, uint64_t pidns_ino) {
  if (start_wall_ns) wd_rf_process_start = start_wall_ns;
  snprintf(wd_rf_boot_id, sizeof wd_rf_boot_id, "%s", boot_id ? boot_id : "");
  wd_rf_pidns = pidns_ino;
}

int wd_ringfile_create(wd_ringfile *f, const char *dir, const char *host, uint32_t ring_cap,
                       uint32_t proxy_ring_cap) {
  memset(f, 0, sizeof(*f));
  if (!dir || !*dir || wd_rf_mkdir(dir) != 0) return -1;
  if (!wd_rf_process_start) wd_rf_process_start = wd_rf_wall_ns();
  unsigned n = atomic_fetch_add(&wd_rf_counter, 1);
  int len = snprintf(f->path, sizeof f->path, "%s/%s-%d-%llu-%u.ring", dir, host && *host ? host : "host",
                     (int)getpid(), (unsigned long long)(wd_rf_process_start / 1000000000ull), n);
  if (len < 0 || (size_t)len >= sizeof f->path) {
    errno = ENAMETOOLONG;
    f->path[0] = '\0';
    return -1;
  }
  int fd = open(f->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    f->path[0] = '\0';
    return -1;
  }
  uint64_t bytes = wd_rf_file_bytes(ring_cap, proxy_ring_cap);
  uint64_t ring_off = WD_RF_HEADER_BYTES + (uint64_t)WD_RF_STRINGS * WD_RF_STRLEN;
  uint64_t proxy_off = ring_off + (uint64_t)ring_cap * sizeof(wd_record);
  uint32_t init = WD_RF_INITIAL_RECORDS;
  void *base = MAP_FAILED;
  /* Sparse at its full size; allocated (posix_fallocate: a full /dev/shm fails here, not with
   * SIGBUS on the hot path later) for the header, the strings and the first records of each ring.
   * The rest is allocated when the communicator carries traffic (wd_ringfile_reserve). */
  if (ftruncate(fd, (off_t)bytes) == 0 &&
      posix_fallocate(fd, 0, (off_t)(ring_off + (uint64_t)(init < ring_cap ? init : ring_cap) * sizeof(wd_record))) == 0 &&
      posix_fallocate(fd, (off_t)proxy_off, (off_t)((uint64_t)(init < proxy_ring_cap ? init : proxy_ring_cap) * sizeof(wd_record))) == 0)
    base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(f->path);
    f->path[0] = '\0';
    errno = saved;
    return -1;
  }
  f->base = base;
  f->bytes = bytes;
  wd_rf_header *h = base;
  memcpy(h->magic, WD_RF_MAGIC, 8);
  h->version = WD_RF_VERSION;
  h->header_bytes = WD_RF_HEADER_BYTES;
  h->record_bytes = sizeof(wd_record);
  h->wrap_records = WD_RF_INITIAL_RECORDS;
  h->ring_cap = ring_cap;
  h->proxy_ring_cap = proxy_ring_cap;
  h->file_bytes = bytes;
  h->strtab_off = WD_RF_HEADER_BYTES;
  h->ring_off = h->strtab_off + (uint64_t)WD_RF_STRINGS * WD_RF_STRLEN;
  h->proxy_ring_off = h->ring_off + (uint64_t)ring_cap * sizeof(wd_record);
  h->process_start_wall_ns = wd_rf_process_start;
  h->pid = (int32_t)getpid();
  memcpy(h->boot_id, wd_rf_boot_id, sizeof h->boot_id);
  h->pidns_ino = wd_rf_pidns;
  h->where_sum = wd_rf_where_sum(h);
  const char *rank = getenv("RANK"); /* torchrun, most launchers; SLURM_PROCID otherwise */
  if (!rank) rank = getenv("SLURM_PROCID");
  char *end = NULL;
  long g = rank ? strtol(rank, &end, 10) : -1;
  h->global_rank = (rank && end && *end == '\0' && g >= 0 && g < (1L << 30)) ? (int32_t)g : -1;
  wd_rf_register(base, 1);
  return 0;
}

wd_record *wd_ringfile_ring(const wd_ringfile *f, int proxy) {
  if (!f->base) return NULL;
  const wd_rf_header *h = f->base;
  return (wd_record *)((char *)f->base + (proxy ? h->proxy_ring_off : h->ring_off));
}

wd_rf_header *wd_ringfile_header(const wd_ringfile *f) { return f->base; }

wd_rf_header *wd_ringfile_done_reset(wd_ringfile *f) {
  wd_rf_header *h = f->base;
  if (!h) return NULL;
  for (unsigned i = 0; i < WD_RF_DONE_WORDS; i++) __atomic_store_n(&h->done[i], 0, __ATOMIC_RELAXED);
  __atomic_store_n(&h->p2p_done, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&h->done_magic, WD_RF_DONE_MAGIC, __ATOMIC_RELEASE);
  return h;
}

int wd_ringfile_reserve(const wd_ringfile *f, int proxy, uint32_t upto) {
  const wd_rf_header *h = f->base;
  if (!h || !f->path[0]) return -1;
  uint32_t cap = proxy ? h->proxy_ring_cap : h->ring_cap;
  if (upto > cap) upto = cap;
  int fd = open(f->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = posix_fallocate(fd, (off_t)(proxy ? h->proxy_ring_off : h->ring_off),
                           (off_t)((uint64_t)upto * sizeof(wd_record)));
  close(fd);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return 0;
}

void wd_ringfile_seal_identity(wd_ringfile *f) {
  wd_rf_header *h = f->base;
  if (!h) return;
  h->bind_wall_ns = wd_rf_wall_ns();
  h->bind_mono_ns = wd_rf_mono_ns();
  h->ident_sum = wd_rf_ident_sum(h);
}

void wd_ringfile_live_begin(wd_ringfile *f) {
  wd_rf_header *h = f->base;
  if (!h) return;
  __atomic_store_n(&h->live_gen, h->live_gen | 1, __ATOMIC_RELEASE);
  h->live_mono_ns = wd_rf_mono_ns();
  h->live_wall_ns = wd_rf_wall_ns();
}

void wd_ringfile_live_end(wd_ringfile *f) {
  wd_rf_header *h = f->base;
  if (!h) return;
  h->live_sum = wd_rf_live_sum(h);
  h->open_sum = wd_rf_open_sum(h);
  __atomic_store_n(&h->live_gen, (h->live_gen | 1) + 1, __ATOMIC_RELEASE);
}

void wd_ringfile_close(wd_ringfile *f, int keep) {
  if (f->base) {
    wd_rf_register(f->base, 0);
    munmap(f->base, f->bytes);
  }
  if (f->path[0] && !keep) unlink(f->path);
  memset(f, 0, sizeof(*f));
}
